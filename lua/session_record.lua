-- Keep a batch's page views in their users' sessions in time order; count the sessions started and
-- the page transitions. A session is a list sorted by ts, oldest first: a view at or after the last
-- entry is appended (RPUSH); a late one goes before the first later entry (one LRANGE of at most N
-- entries, LINSERT); past N entries LTRIM keeps the newest N, and PEXPIRE renews the window. A view
-- older than every entry of a full list is not added. A view that makes a new list starts a
-- session, counted on its own day. With transitions on, a step (not a reload, nor a page holding a
-- NUL) is counted between neighbours by ts, on the later view's day, in that day's two sets,
-- trimming the least frequent past each cap plus its slack (amortized O(log N) a view). A view
-- inserted between A and C takes back A -> C (at 0 it leaves both sets; one not found, trimmed or
-- never counted, is left alone), then counts A -> view and view -> C. A script, not MULTI: RPUSH's
-- reply decides the count. Users tombstoned at now are skipped; a key gets its TTL when made. The
-- caller passes only views within the session window, and declares every day they and the entries
-- after them can fall on.
-- Fenced: lua/fence.lua runs first and takes its key and arguments; KEYS and ARGV below are
-- what it leaves.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2 .. 1 + 3 D] 3 per day, oldest first: sessions started, transitions, transition index
-- KEYS[2 + 3 D ..] one session list per view (a user's list once per view of theirs)
-- ARGV[1]  D: days declared (>= 1)
-- ARGV[2]  session window, milliseconds (>= 1)
-- ARGV[3]  pages kept per session (N >= 1)
-- ARGV[4]  TTL of the day's keys, seconds (>= 1)
-- ARGV[5]  1: count transitions, 0: do not
-- ARGV[6]  next pages kept per page (>= 1), ARGV[7] the slack of that cap (>= 0)
-- ARGV[8]  steps kept per day (>= 1), ARGV[9] the slack of that cap (>= 0)
-- ARGV[10] now, epoch seconds
-- ARGV[11 .. 11 + D] the epoch second each day starts, then the end of the last (increasing)
-- ARGV[12 + D ..] 4 per view, in the order of the session lists: user id, entry (JSON), path, ts
-- Returns  the number of views that started a new session.
local days = tonumber(ARGV[1])
if days == nil or days < 1 or days % 1 ~= 0 or #KEYS < 1 + 3 * days or #ARGV < 11 + days then
  return redis.error_reply('session_record: expected 1 key and 3 per day, 11 arguments and a day start per day')
end
local views = #KEYS - 1 - 3 * days
local first_view = 12 + days
if #ARGV ~= first_view - 1 + 4 * views then
  return redis.error_reply('session_record: expected a key and 4 arguments per view')
end
local window, keep, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_next, next_slack = tonumber(ARGV[6]), tonumber(ARGV[7])
local max_steps, steps_slack = tonumber(ARGV[8]), tonumber(ARGV[9])
local now = tonumber(ARGV[10])
if window == nil or window < 1 or keep == nil or keep < 1 or ttl == nil or ttl < 1 or now == nil then
  return redis.error_reply('session_record: window, pages kept and TTL must be positive numbers, now a number')
end
if max_next == nil or max_next < 1 or next_slack == nil or next_slack < 0
    or max_steps == nil or max_steps < 1 or steps_slack == nil or steps_slack < 0 then
  return redis.error_reply('session_record: caps must be >= 1 and their slacks >= 0')
end
-- The per-view commands take their numbers as text (ARGV's, literals, this): Redis 7.0 formats each
-- Lua number given to redis.call with snprintf's %.17g, more work than a short command's own.
local trim_from = string.format('%d', -keep)
local bounds = {}
for d = 1, days + 1 do
  bounds[d] = tonumber(ARGV[10 + d])
  if bounds[d] == nil or (d > 1 and bounds[d] <= bounds[d - 1]) then
    return redis.error_reply('session_record: day starts must be increasing numbers')
  end
end

-- The local functions take what they use as arguments: one that names a local of the script makes
-- Redis's Lua allocate (and collect) an upvalue for it at every call.

-- The declared day holding ``ts`` (1..D), or nil.
local function day_of(ts, edges)
  if ts == nil or ts < edges[1] then
    return nil
  end
  for d = 2, #edges do
    if ts < edges[d] then
      return d - 1
    end
  end
  return nil
end

local view_ts = {}
for i = 1, views do
  view_ts[i] = tonumber(ARGV[first_view + 4 * (i - 1) + 3])
  if day_of(view_ts[i], bounds) == nil then
    return redis.error_reply('session_record: each view ts must be a number within the declared days')
  end
end

local CHUNK = 1000 -- members per variadic command, well under Lua's unpack limit

-- (path, ts) of a session entry; only an entry of ours has a string path and a number ts.
local function read(entry)
  local ok, decoded = pcall(cjson.decode, entry)
  if not (ok and type(decoded) == 'table') then
    return nil, nil
  end
  local path, ts = decoded.path, decoded.ts
  return type(path) == 'string' and path or nil, type(ts) == 'number' and ts or nil
end

-- Whether ``from`` -> ``to`` is a step: two different pages, neither empty nor holding a NUL.
local function is_step(from, to)
  return type(from) == 'string' and type(to) == 'string' and from ~= to and from ~= ''
    and not string.find(from, '\0', 1, true) and not string.find(to, '\0', 1, true)
end

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

-- Count the step ``from`` -> ``to`` in a day's two sets (``caps``: ttl, max_next, next_slack,
-- max_steps, steps_slack), trimming past the caps.
local function count(counts, index, from, to, caps)
  local step = from .. '\0' .. to
  if tonumber(redis.call('ZINCRBY', counts, '1', step)) ~= 1 then
    return
  end
  redis.call('ZADD', index, '0', step)
  local size = redis.call('ZCARD', counts)
  if size == 1 then
    redis.call('EXPIRE', counts, caps.ttl)
    redis.call('EXPIRE', index, caps.ttl)
  elseif size > caps.max_steps + caps.steps_slack then
    trim_day(counts, index, caps.max_steps)
  end
  local low, high = '[' .. from .. '\0', '(' .. from .. '\1'
  if redis.call('ZLEXCOUNT', index, low, high) > caps.max_next + caps.next_slack then
    trim_page(counts, index, low, high, caps.max_next)
  end
end

-- Take back one count of the step ``from`` -> ``to`` from a day's two sets: at 0 it leaves both; a
-- step not found is left alone (never created, never negative).
local function take_back(counts, index, from, to)
  local step = from .. '\0' .. to
  local times = tonumber(redis.call('ZSCORE', counts, step))
  if times == nil then
    return
  end
  if times <= 1 then
    redis.call('ZREM', counts, step)
    redis.call('ZREM', index, step)
  else
    redis.call('ZINCRBY', counts, '-1', step)
  end
end

local caps = {
  ttl = ttl, max_next = max_next, next_slack = next_slack, max_steps = max_steps, steps_slack = steps_slack,
}
local transitions = ARGV[5] == '1'
local tombstones = KEYS[1]
local started_counters, counts, index, started = {}, {}, {}, {}
for d = 1, days do
  started_counters[d], counts[d], index[d] = KEYS[3 * d - 1], KEYS[3 * d], KEYS[3 * d + 1]
  started[d] = 0
end
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
for i = 1, views do
  local session, a = KEYS[1 + 3 * days + i], first_view + 4 * (i - 1)
  local user, entry, path, ts = ARGV[a], ARGV[a + 1], ARGV[a + 2], view_ts[i]
  local day = day_of(ts, bounds)
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  if not (expiry and tonumber(expiry) > now) then
    local last = redis.call('LINDEX', session, '-1')
    local last_path, last_ts
    if last then
      last_path, last_ts = read(last)
    end
    if not last or last_ts == nil or last_ts <= ts then
      -- The common case: the newest view of the session goes at the end.
      if transitions and is_step(last_path, path) then
        count(counts[day], index[day], last_path, path, caps)
      end
      local length = redis.call('RPUSH', session, entry)
      if length == 1 then
        started[day] = started[day] + 1
      elseif length > keep then
        redis.call('LTRIM', session, trim_from, '-1')
      end
      redis.call('PEXPIRE', session, ARGV[2])
    else
      -- A late view: before the first entry with a greater ts (the last one has), unless the list is
      -- full and every entry is later, when the newest N do not include it.
      local entries = redis.call('LRANGE', session, '0', '-1')
      local at = #entries
      for n = 1, #entries do
        local _, entry_ts = read(entries[n])
        if entry_ts ~= nil and entry_ts > ts then
          at = n
          break
        end
      end
      if at > 1 or #entries < keep then
        -- The insert first: Redis refuses it over maxmemory, where it would let the take-back's ZREM
        -- (and, the script having written, every write after it) in. Identical entries are
        -- interchangeable: any of them is a right pivot.
        if redis.call('LINSERT', session, 'BEFORE', entries[at], entry) > keep then
          redis.call('LTRIM', session, trim_from, '-1')
        end
        redis.call('PEXPIRE', session, ARGV[2])
        if transitions then
          local before_path = at > 1 and read(entries[at - 1]) or nil
          local after_path, after_ts = read(entries[at])
          local after_day = day_of(after_ts, bounds)
          if after_day and is_step(before_path, after_path) then
            take_back(counts[after_day], index[after_day], before_path, after_path)
          end
          if is_step(before_path, path) then
            count(counts[day], index[day], before_path, path, caps)
          end
          if after_day and is_step(path, after_path) then
            count(counts[after_day], index[after_day], path, after_path, caps)
          end
        end
      end
    end
  end
end
local total = 0
for d = 1, days do
  if started[d] > 0 and redis.call('INCRBY', started_counters[d], started[d]) == started[d] then
    redis.call('EXPIRE', started_counters[d], ttl)
  end
  total = total + started[d]
end
return total
