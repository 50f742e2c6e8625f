-- Fold one of an earlier release's per-user page-view keys (a display name, or one period's view
-- counter) into the user's views hash, and delete it: a counter adds to what this release counted
-- meanwhile, a name never replaces one this release set. The hash keeps the longer of the two
-- TTLs. A repeat finds nothing and changes nothing.
--
-- KEYS[1]  the earlier key (string)
-- KEYS[2]  the user's views hash
-- ARGV[1]  the hash field it becomes: 'name', or the period's name (d:YYYYMMDD, w:YYYYWww)
-- ARGV[2]  TTL, seconds, for a key found without one (>= 1)
-- Returns  1 when the key was folded, 0 when it was gone.
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('viewer_fold: expected 2 keys and 2 arguments')
end
local field, default_ttl = ARGV[1], tonumber(ARGV[2])
if default_ttl == nil or default_ttl < 1 then
  return redis.error_reply('viewer_fold: the TTL must be >= 1')
end
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local ttl = redis.call('TTL', KEYS[1])
if ttl < 1 then
  ttl = default_ttl
end
if field == 'name' then
  redis.call('HSETNX', KEYS[2], field, value)
else
  redis.call('HINCRBY', KEYS[2], field, value)
end
if redis.call('TTL', KEYS[2]) < ttl then
  redis.call('EXPIRE', KEYS[2], ttl)
end
redis.call('DEL', KEYS[1])
return 1
