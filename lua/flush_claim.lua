-- Claim changed members for a database flush (the reliable-queue pattern: pop from "dirty" and
-- push into "claimed" in one atomic step, so a member is always in one of the two until the
-- flush that claimed it has committed to the database and acknowledged it).
--
-- KEYS[1]  last-seen sorted set (member = user id, score = epoch seconds)
-- KEYS[2]  dirty sorted set (members changed since their last flush, score = first change time)
-- KEYS[3]  claimed sorted set (members being flushed, score = claim time)
-- KEYS[4]  tombstones of erased users (member -> expiry)
-- ARGV[1]  now, epoch seconds: the claim time (the caller's clock; scripts never read the clock)
-- ARGV[2]  how many members to claim at most (the oldest changes first)
-- Returns  {claimed, erased}: claimed is member, last seen, member, last seen, ...; erased the
--          popped members tombstoned at now, not claimed, whose rows the caller deletes. A dirty
--          member with no last seen left is dropped.
if #KEYS ~= 4 or #ARGV ~= 2 then
  return redis.error_reply('flush_claim: expected 4 keys and 2 arguments')
end
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == nil or limit == nil or limit < 1 then
  return redis.error_reply('flush_claim: now must be a number and limit a positive integer')
end

local CHUNK = 1000 -- members per ZMSCORE/ZADD, well under Lua's unpack limit
local seen, dirty, claims, tombstones = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local popped = redis.call('ZPOPMIN', dirty, limit)
local erasures = redis.call('EXISTS', tombstones) == 1
local claimed, erased = {}, {}
for first = 1, #popped, 2 * CHUNK do
  local members = {}
  for i = first, math.min(first + 2 * CHUNK - 1, #popped), 2 do
    members[#members + 1] = popped[i]
  end
  local scores = redis.call('ZMSCORE', seen, unpack(members))
  local tombs = erasures and redis.call('ZMSCORE', tombstones, unpack(members)) or {}
  local marks = {}
  for n = 1, #members do
    if tombs[n] and tonumber(tombs[n]) > now then
      erased[#erased + 1] = members[n]
    elseif scores[n] then
      marks[#marks + 1] = ARGV[1]
      marks[#marks + 1] = members[n]
      claimed[#claimed + 1] = members[n]
      claimed[#claimed + 1] = scores[n]
    end
  end
  if #marks > 0 then
    redis.call('ZADD', claims, unpack(marks))
  end
end
return {claimed, erased}
