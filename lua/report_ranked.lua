-- Build a ranked report's copy where SORT may not use BY / GET patterns (a Redis 7.0 cluster): a
-- SORT whose members carry their sort key. Each of the period's first K top viewers becomes one
-- member "views NUL user NUL name", views zero-padded to 20 digits, in a candidates list; then
-- SORT candidates ALPHA DESC LIMIT 0 K STORE rows. A byte-wise sort of those members orders by
-- views, then by user id byte by byte (NUL ends an id before any byte that would extend it), both
-- descending: the order of SORT viewers BY views DESC. Names are read from the key the name stem
-- followed by the user id names (the {pv} slot of every key here); a missing one is '', as SORT's
-- GET gives. Then the candidates' DEL, the rows' PEXPIRE and the meta.
--
-- KEYS[1]  the period's top viewers (zset user -> views)
-- KEYS[2]  the candidates list (deleted again here)
-- KEYS[3]  the copy's rows (list, one member per row; replaced)
-- KEYS[4]  the copy's meta (string: build time)
-- KEYS[5]  the stem of the display-name keys (the name key of user u is this followed by u)
-- ARGV[1]  rows kept (K >= 1), ARGV[2] the copy's lifetime in milliseconds, ARGV[3] now (build time)
-- Returns  the number of rows stored
local top, keep_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
if top == nil or top < 1 or keep_ms == nil or keep_ms < 1 then
  return redis.error_reply('report_ranked: rows kept and lifetime must be positive numbers')
end
local ranked = redis.call('ZRANGE', KEYS[1], 0, top - 1, 'REV', 'WITHSCORES')
redis.call('DEL', KEYS[2])
for i = 1, #ranked, 2 do
  local user, views = ranked[i], tonumber(ranked[i + 1])
  local name = redis.call('GET', KEYS[5] .. user) or ''
  redis.call('RPUSH', KEYS[2], string.format('%020d', views) .. '\0' .. user .. '\0' .. name)
end
local stored = redis.call('SORT', KEYS[2], 'LIMIT', 0, top, 'ALPHA', 'DESC', 'STORE', KEYS[3])
redis.call('DEL', KEYS[2])
redis.call('PEXPIRE', KEYS[3], keep_ms)
redis.call('SET', KEYS[4], ARGV[3], 'PX', keep_ms)
return stored
