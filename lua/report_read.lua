-- Read one page of a cached report copy and mark the report as read, atomically: the copy's life,
-- build time, length and rows describe the same copy, and the refresh job learns someone reads it.
--
-- KEYS[1]  the copy's meta (string: build time)
-- KEYS[2]  the copy's rows (list)
-- KEYS[3]  the reports read lately (zset marker -> time read)
-- ARGV[1]  the first and ARGV[2] the last list index of the page
-- ARGV[3]  the marker (report:period), ARGV[4] now, ARGV[5] the read set's TTL, seconds
-- Returns  {PTTL of the meta, the build time or false, the rows' length, the page's entries}
local meta, rows, read = KEYS[1], KEYS[2], KEYS[3]
redis.call('ZADD', read, ARGV[4], ARGV[3])
redis.call('EXPIRE', read, ARGV[5])
return {
  redis.call('PTTL', meta),
  redis.call('GET', meta),
  redis.call('LLEN', rows),
  redis.call('LRANGE', rows, ARGV[1], ARGV[2]),
}
