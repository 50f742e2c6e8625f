-- Claim changed members for a database flush (the reliable-queue pattern: pop from "dirty" and
-- push into "claimed" in one atomic step, so a member is always in one of the two until the
-- flush that claimed it has committed to the database and acknowledged it).
--
-- KEYS[1]  last-seen sorted set (member = user id, score = epoch seconds)
-- KEYS[2]  dirty sorted set (members changed since their last flush, score = first change time)
-- KEYS[3]  claimed sorted set (members being flushed, score = claim time)
-- ARGV[1]  now, epoch seconds: the claim time (the caller's clock; scripts never read the clock)
-- ARGV[2]  how many members to claim at most (the oldest changes first)
-- Returns  a flat array member1, last_seen1, member2, last_seen2, ... of the claimed members with
--          their current last-seen scores. A dirty member with no last-seen score left is dropped.
if #KEYS ~= 3 or #ARGV ~= 2 then
  return redis.error_reply('flush_claim: expected 3 keys and 2 arguments')
end
local limit = tonumber(ARGV[2])
if tonumber(ARGV[1]) == nil or limit == nil or limit < 1 then
  return redis.error_reply('flush_claim: now must be a number and limit a positive integer')
end

local popped = redis.call('ZPOPMIN', KEYS[2], limit)
local claimed = {}
for i = 1, #popped, 2 do
  local member = popped[i]
  local score = redis.call('ZSCORE', KEYS[1], member)
  if score ~= false then
    redis.call('ZADD', KEYS[3], ARGV[1], member)
    claimed[#claimed + 1] = member
    claimed[#claimed + 1] = score
  end
end
return claimed
