-- Acknowledge flushed members: remove each from "claimed" only if it still carries this flush's
-- claim time. A claim that the reaper handed back and another flush re-claimed carries a newer
-- claim time and stays, so a slow flush can never drop a claim that is not its own.
--
-- KEYS[1]  claimed sorted set (score = claim time)
-- ARGV[1]  the claim time this flush used (the same string it passed to flush_claim)
-- ARGV[2], ARGV[3], ...  the members this flush wrote to the database
-- Returns  the number of members removed from "claimed".
if #KEYS ~= 1 or #ARGV < 1 then
  return redis.error_reply('flush_ack: expected 1 key, the claim time and members')
end
local claim_time = tonumber(ARGV[1])
if claim_time == nil then
  return redis.error_reply('flush_ack: claim time is not a number: ' .. ARGV[1])
end
local removed = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score ~= false and tonumber(score) == claim_time then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
