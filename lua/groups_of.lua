-- Read many users' group indexes in one call (the request pipeline asks for every user of a batch;
-- one script instead of one SMEMBERS per user keeps that a single command).
--
-- KEYS[1..n]  the users' group index sets (all under the {grp} hash tag)
-- ARGV        none
-- Returns     an array of n arrays: the group ids in each user's index, empty when there is none.
local found = {}
for i = 1, #KEYS do
  found[i] = redis.call('SMEMBERS', KEYS[i])
end
return found
