-- Read many users' group indexes in one call (the request pipeline asks for every user of a batch,
-- store.client.PER_CALL users a call, so a batch is a few commands, not a SMEMBERS per user). A
-- build sets KEYS[1] with the indexes and for at least as long: while it is absent no index exists,
-- and none is read.
--
-- KEYS[1]     present while a user's group index may exist
-- KEYS[2..]   the users' group index sets (all under the {grp} hash tag)
-- ARGV        none
-- Returns     an empty array while KEYS[1] is absent; else an array of an array per user: the group
--             ids in the user's index, empty when there is none.
local found = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return found
end
for i = 2, #KEYS do
  found[i - 1] = redis.call('SMEMBERS', KEYS[i])
end
return found
