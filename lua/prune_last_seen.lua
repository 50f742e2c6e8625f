-- Remove last-seen members older than the retention cutoff, except any whose change has not
-- reached the database yet (still in "dirty" or "claimed"): those stay until flushed.
--
-- KEYS[1]  last-seen sorted set
-- KEYS[2]  dirty sorted set
-- KEYS[3]  claimed sorted set
-- ARGV[1]  cutoff, epoch seconds: members with a last seen strictly before it are removed
-- ARGV[2]  offset into the members before the cutoff (the ones kept by earlier calls of this run)
-- ARGV[3]  how many members to examine at most in this call
-- Returns  {examined, removed}: kept = examined - removed, the caller's next offset grows by it.
if #KEYS ~= 3 or #ARGV ~= 3 then
  return redis.error_reply('prune_last_seen: expected 3 keys and 3 arguments')
end
local offset, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if tonumber(ARGV[1]) == nil or offset == nil or offset < 0 or limit == nil or limit < 1 then
  return redis.error_reply('prune_last_seen: expected a numeric cutoff, offset >= 0 and limit >= 1')
end
local seen, dirty, claimed = KEYS[1], KEYS[2], KEYS[3]
local old = redis.call('ZRANGE', seen, '-inf', '(' .. ARGV[1], 'BYSCORE', 'LIMIT', offset, limit)
local removed = 0
for _, member in ipairs(old) do
  if redis.call('ZSCORE', dirty, member) == false and redis.call('ZSCORE', claimed, member) == false then
    removed = removed + redis.call('ZREM', seen, member)
  end
end
return {#old, removed}
