-- Build a ranked report's copy where SORT may not use BY / GET patterns (a Redis 7.0 cluster):
-- the same rows as SORT top BY views DESC GET # GET name:* GET views:* STORE, from the period's top
-- viewers, whose scores are the users' view counts and whose order is SORT's (views, then user id
-- byte by byte, descending). Each user's display name is read from the key the name stem followed
-- by the user id names (the {pv} slot of every key here). Then the rows' PEXPIRE and the meta.
--
-- KEYS[1]  the period's top viewers (zset user -> views)
-- KEYS[2]  the copy's rows (list: user, name, views per row; replaced)
-- KEYS[3]  the copy's meta (string: build time)
-- KEYS[4]  the stem of the display-name keys (the name key of user u is this followed by u)
-- ARGV[1]  rows kept (K >= 1), ARGV[2] the copy's lifetime in milliseconds, ARGV[3] now (build time)
-- Returns  the number of rows stored
local top, keep_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
if top == nil or top < 1 or keep_ms == nil or keep_ms < 1 then
  return redis.error_reply('report_ranked: rows kept and lifetime must be positive numbers')
end
local ranked = redis.call('ZRANGE', KEYS[1], 0, top - 1, 'REV', 'WITHSCORES')
redis.call('DEL', KEYS[2])
local rows = {}
for i = 1, #ranked, 2 do
  local user, views = ranked[i], ranked[i + 1]
  rows[#rows + 1] = user
  rows[#rows + 1] = redis.call('GET', KEYS[4] .. user) or '' -- SORT ... GET of a missing key: ''
  rows[#rows + 1] = views
end
for first = 1, #rows, 3000 do -- a few thousand arguments per RPUSH, under Lua's unpack limit
  redis.call('RPUSH', KEYS[2], unpack(rows, first, math.min(first + 2999, #rows)))
end
redis.call('PEXPIRE', KEYS[2], keep_ms)
redis.call('SET', KEYS[3], ARGV[3], 'PX', keep_ms)
return #rows / 3
