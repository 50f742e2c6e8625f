-- Record one day's page views of a batch: append each to its user's session (RPUSH, LTRIM to the
-- newest N, PEXPIRE to the window) and count those that began a new list as sessions started; with
-- transitions on, count the step from the session's last page to this one (not a reload, nor a page
-- holding a NUL) in the day's two sets, trimming the least frequent past each cap plus its slack:
-- amortized O(log N) a view. A script, not MULTI, because RPUSH's reply decides the count. Users
-- tombstoned at now are skipped; a key gets its TTL when made.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  sessions started that day (string counter)
-- KEYS[3]  the day's transitions (zset "previous NUL page" -> times)
-- KEYS[4]  the day's transition index (zset, the same members, score 0)
-- KEYS[5..] one session list per view (a user's list once per view of theirs)
-- ARGV[1]  session window, milliseconds (>= 1)
-- ARGV[2]  pages kept per session (N >= 1)
-- ARGV[3]  TTL of the day's keys, seconds (>= 1)
-- ARGV[4]  1: count transitions, 0: do not
-- ARGV[5]  next pages kept per page (>= 1), ARGV[6] the slack of that cap (>= 0)
-- ARGV[7]  steps kept per day (>= 1), ARGV[8] the slack of that cap (>= 0)
-- ARGV[9]  now, epoch seconds
-- ARGV[10..] 3 per view, in the order of the session lists: user id, entry (JSON: path and ts), path
-- Returns  the number of views that started a new session.
local views = #KEYS - 4
if #KEYS < 4 or #ARGV ~= 9 + 3 * views then
  return redis.error_reply('session_record: expected 4 keys and 9 arguments, then a key and 3 arguments per view')
end
local window, keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local transitions = ARGV[4] == '1'
local max_next, next_slack = tonumber(ARGV[5]), tonumber(ARGV[6])
local max_steps, steps_slack = tonumber(ARGV[7]), tonumber(ARGV[8])
local now = tonumber(ARGV[9])
if window == nil or window < 1 or keep == nil or keep < 1 or ttl == nil or ttl < 1 or now == nil then
  return redis.error_reply('session_record: window, pages kept and TTL must be positive numbers, now a number')
end
if max_next == nil or max_next < 1 or next_slack == nil or next_slack < 0
    or max_steps == nil or max_steps < 1 or steps_slack == nil or steps_slack < 0 then
  return redis.error_reply('session_record: caps must be >= 1 and their slacks >= 0')
end

-- The local functions take what they use as arguments: one that names a local of the script makes
-- Redis's Lua allocate (and collect) an upvalue for it at every call.

local CHUNK = 1000 -- members per variadic command, well under Lua's unpack limit

-- ZREM ``members`` from ``key``, a chunk per command.
local function remove(key, members)
  for at = 1, #members, CHUNK do
    redis.call('ZREM', key, unpack(members, at, math.min(at + CHUNK - 1, #members)))
  end
end

-- Keep the ``cap`` most frequent steps of the day: the least frequent (ties: the lowest member)
-- leave both sets.
local function trim_day(counts, index, cap)
  local gone = redis.call('ZRANGE', counts, 0, -cap - 1)
  redis.call('ZREMRANGEBYRANK', counts, 0, -cap - 1)
  remove(index, gone)
end

-- Keep the ``cap`` most frequent steps from one page (its index range ``from``..``to``): the least
-- frequent, ties to the lowest member (the order of the range), leave both sets.
local function trim_page(counts, index, from, to, cap)
  local members = redis.call('ZRANGEBYLEX', index, from, to)
  local times, order = {}, {}
  for at = 1, #members, CHUNK do
    local found = redis.call('ZMSCORE', counts, unpack(members, at, math.min(at + CHUNK - 1, #members)))
    for n = 1, #found do
      times[at + n - 1] = tonumber(found[n]) or 0
    end
  end
  for n = 1, #members do
    order[n] = n
  end
  table.sort(order, function(a, b)
    if times[a] ~= times[b] then
      return times[a] < times[b]
    end
    return a < b
  end)
  local gone = {}
  for n = 1, #members - cap do
    gone[n] = members[order[n]]
  end
  remove(counts, gone)
  remove(index, gone)
end

local tombstones, started_counter, counts, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local started = 0
for i = 1, views do
  local session, a = KEYS[4 + i], 9 + 3 * (i - 1)
  local user, entry, path = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  if not (expiry and tonumber(expiry) > now) then
    if transitions then
      local last = redis.call('LINDEX', session, -1)
      if last then
        -- Only an entry of ours has a string path.
        local ok, decoded = pcall(cjson.decode, last)
        local previous = ok and type(decoded) == 'table' and decoded.path
        if type(previous) == 'string' and previous ~= path and previous ~= ''
            and not string.find(previous, '\0', 1, true) and not string.find(path, '\0', 1, true) then
          local step = previous .. '\0' .. path
          if tonumber(redis.call('ZINCRBY', counts, 1, step)) == 1 then
            redis.call('ZADD', index, 0, step)
            local size = redis.call('ZCARD', counts)
            if size == 1 then
              redis.call('EXPIRE', counts, ttl)
              redis.call('EXPIRE', index, ttl)
            elseif size > max_steps + steps_slack then
              trim_day(counts, index, max_steps)
            end
            local from, to = '[' .. previous .. '\0', '(' .. previous .. '\1'
            if redis.call('ZLEXCOUNT', index, from, to) > max_next + next_slack then
              trim_page(counts, index, from, to, max_next)
            end
          end
        end
      end
    end
    if redis.call('RPUSH', session, entry) == 1 then
      started = started + 1
    end
    redis.call('LTRIM', session, -keep, -1)
    redis.call('PEXPIRE', session, window)
  end
end
if started > 0 and redis.call('INCRBY', started_counter, started) == started then
  redis.call('EXPIRE', started_counter, ttl)
end
return started
