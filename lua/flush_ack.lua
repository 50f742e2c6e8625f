-- Acknowledge flushed members: remove each from "claimed" only while it carries this flush's claim
-- time, so a slow flush never drops a newer claim that is not its own. A member erased since its
-- claim stays claimed and is returned: the flush deletes its row, then forgets the claim (a flush
-- that dies first leaves it to the reaper, and the next claim reports the member again).
--
-- KEYS[1]  claimed sorted set (score = claim time)
-- KEYS[2]  tombstones of erased users (member -> expiry)
-- ARGV[1]  the claim time this flush used (the same string it passed to flush_claim)
-- ARGV[2]  now, epoch seconds
-- ARGV[3], ARGV[4], ...  the members this flush wrote to the database
-- Returns  {the number of members removed from "claimed", {the erased members kept there}}.
if #KEYS ~= 2 or #ARGV < 2 then
  return redis.error_reply('flush_ack: expected 2 keys, the claim time, now and members')
end
local claim_time, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if claim_time == nil or now == nil then
  return redis.error_reply('flush_ack: claim time and now must be numbers: ' .. ARGV[1] .. ', ' .. ARGV[2])
end
local CHUNK = 1000 -- members per ZMSCORE/ZREM, well under Lua's unpack limit
local claimed, tombstones = KEYS[1], KEYS[2]
local erasures = redis.call('EXISTS', tombstones) == 1
local removed, erased = 0, {}
for first = 3, #ARGV, CHUNK do
  local members = {}
  for i = first, math.min(first + CHUNK - 1, #ARGV) do
    members[#members + 1] = ARGV[i]
  end
  local scores = redis.call('ZMSCORE', claimed, unpack(members))
  local tombs = erasures and redis.call('ZMSCORE', tombstones, unpack(members)) or {}
  local mine = {}
  for n = 1, #members do
    if scores[n] and tonumber(scores[n]) == claim_time then
      if tombs[n] and tonumber(tombs[n]) > now then
        erased[#erased + 1] = members[n]
      else
        mine[#mine + 1] = members[n]
      end
    end
  end
  if #mine > 0 then
    removed = removed + redis.call('ZREM', claimed, unpack(mine))
  end
end
return {removed, erased}
