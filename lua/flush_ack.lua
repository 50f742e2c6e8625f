-- Acknowledge flushed members: remove each from "claimed" only if it still carries this flush's
-- claim time. A claim that the reaper handed back and another flush re-claimed carries a newer
-- claim time and stays, so a slow flush can never drop a claim that is not its own.
--
-- KEYS[1]  claimed sorted set (score = claim time)
-- ARGV[1]  the claim time this flush used (the same string it passed to flush_claim)
-- ARGV[2], ARGV[3], ...  the members this flush wrote to the database
-- Returns  the number of members removed from "claimed".
--
-- One ZMSCORE and one variadic ZREM per chunk of members, not two calls per member.
if #KEYS ~= 1 or #ARGV < 1 then
  return redis.error_reply('flush_ack: expected 1 key, the claim time and members')
end
local claim_time = tonumber(ARGV[1])
if claim_time == nil then
  return redis.error_reply('flush_ack: claim time is not a number: ' .. ARGV[1])
end
local CHUNK = 1000 -- members per ZMSCORE/ZREM, well under Lua's unpack limit
local removed = 0
for first = 2, #ARGV, CHUNK do
  local members = {}
  for i = first, math.min(first + CHUNK - 1, #ARGV) do
    members[#members + 1] = ARGV[i]
  end
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(members))
  local mine = {}
  for n = 1, #members do
    if scores[n] and tonumber(scores[n]) == claim_time then
      mine[#mine + 1] = members[n]
    end
  end
  if #mine > 0 then
    removed = removed + redis.call('ZREM', KEYS[1], unpack(mine))
  end
end
return removed
