-- Keep a batch's page views in their users' sessions in time order and count the sessions started;
-- queue the page transitions the views make for lua/transitions_count.lua. A session is a list
-- sorted by ts, oldest first: a view at or after the last entry is appended (RPUSH); a late one goes
-- before the first later entry (one LRANGE of at most N entries, LINSERT); past N entries LTRIM
-- keeps the newest N, and PEXPIRE renews the window. A view older than every entry of a full list is
-- not added. A view that makes a new list starts a session, counted on its own day. With transitions
-- on, a step (not a reload, nor a page holding a NUL) between neighbours by ts is queued on the
-- later view's day: "+A NUL B" counts A -> B, "-A NUL B" takes one count back. A view inserted
-- between A and C takes back A -> C, then counts A -> view and view -> C. A script, not MULTI:
-- RPUSH's reply decides the count. Users tombstoned at now are skipped; a key gets its TTL when
-- made. The caller passes only views within the session window, and declares every day they and the
-- entries after them can fall on.
-- Prelude: lua/fence.lua, run first: it takes its key and arguments; KEYS and ARGV below are
-- what it leaves.
-- Prelude: lua/tombstones.lua (tombstoned).
-- Prelude: lua/session_entry.lua (entry_parts).
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2 .. 1 + 2 D] 2 per day, oldest first: sessions started, the steps queued for counting (list)
-- KEYS[2 + 2 D ..] one session list per view (a user's list once per view of theirs)
-- ARGV[1]  D: days declared (>= 1)
-- ARGV[2]  session window, milliseconds (>= 1)
-- ARGV[3]  pages kept per session (N >= 1)
-- ARGV[4]  TTL of the day's keys, seconds (>= 1)
-- ARGV[5]  1: queue transitions, 0: do not
-- ARGV[6]  now, epoch seconds
-- ARGV[7 .. 7 + D] the epoch second each day starts, then the end of the last (increasing)
-- ARGV[8 + D ..] 2 per view, in the order of the session lists: user id, entry (store.sessions.entry)
-- Returns  the number of views that started a new session.
local days = tonumber(ARGV[1])
if days == nil or days < 1 or days % 1 ~= 0 or #KEYS < 1 + 2 * days or #ARGV < 7 + days then
  return redis.error_reply('session_record: expected 1 key and 2 per day, 6 arguments and a day start per day')
end
local views = #KEYS - 1 - 2 * days
local first_view = 8 + days
if #ARGV ~= first_view - 1 + 2 * views then
  return redis.error_reply('session_record: expected a key and 2 arguments per view')
end
local window, keep, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = tonumber(ARGV[6])
if window == nil or window < 1 or keep == nil or keep < 1 or ttl == nil or ttl < 1 or now == nil then
  return redis.error_reply('session_record: window, pages kept and TTL must be positive numbers, now a number')
end
-- The per-view commands take their numbers as text (ARGV's, literals, this): Redis 7.0 formats each
-- Lua number given to redis.call with snprintf's %.17g, more work than a short command's own.
local trim_from = string.format('%d', -keep)
local bounds = {}
for d = 1, days + 1 do
  bounds[d] = tonumber(ARGV[6 + d])
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

local view_path, view_ts = {}, {}
for i = 1, views do
  view_path[i], view_ts[i] = entry_parts(ARGV[first_view + 2 * i - 1])
  if day_of(view_ts[i], bounds) == nil then
    return redis.error_reply('session_record: each view entry must hold a ts within the declared days')
  end
end

local CHUNK = 1000 -- members per variadic command, well under Lua's unpack limit

-- Queue ``sign`` ('+' or '-') ``from`` -> ``to`` on the day's list of ``queued`` when it is a step:
-- two different pages, neither empty nor holding a NUL.
local function queue(queued, sign, from, to)
  if type(from) == 'string' and type(to) == 'string' and from ~= to and from ~= ''
      and not string.find(from, '\0', 1, true) and not string.find(to, '\0', 1, true) then
    queued[#queued + 1] = sign .. from .. '\0' .. to
  end
end

local transitions = ARGV[5] == '1'
local tombstones = KEYS[1]
local started, steps = {}, {}
for d = 1, days do
  started[d], steps[d] = 0, {}
end
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
for i = 1, views do
  local session, a = KEYS[1 + 2 * days + i], first_view + 2 * (i - 1)
  local user, entry, path, ts = ARGV[a], ARGV[a + 1], view_path[i], view_ts[i]
  local day = day_of(ts, bounds)
  if not (erasures and tombstoned(tombstones, user, now)) then
    local last = redis.call('LINDEX', session, '-1')
    local last_path, last_ts
    if last then
      last_path, last_ts = entry_parts(last)
    end
    if not last or last_ts == nil or last_ts <= ts then
      -- The common case: the newest view of the session goes at the end.
      if transitions then
        queue(steps[day], '+', last_path, path)
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
        local _, entry_ts = entry_parts(entries[n])
        if entry_ts ~= nil and entry_ts > ts then
          at = n
          break
        end
      end
      if at > 1 or #entries < keep then
        -- Identical entries are interchangeable: any of them is a right pivot.
        if redis.call('LINSERT', session, 'BEFORE', entries[at], entry) > keep then
          redis.call('LTRIM', session, trim_from, '-1')
        end
        redis.call('PEXPIRE', session, ARGV[2])
        if transitions then
          local before_path = at > 1 and entry_parts(entries[at - 1]) or nil
          local after_path, after_ts = entry_parts(entries[at])
          local after_day = day_of(after_ts, bounds)
          if after_day then
            queue(steps[after_day], '-', before_path, after_path)
          end
          queue(steps[day], '+', before_path, path)
          if after_day then
            queue(steps[after_day], '+', path, after_path)
          end
        end
      end
    end
  end
end
local total = 0
for d = 1, days do
  if started[d] > 0 and redis.call('INCRBY', KEYS[2 * d], started[d]) == started[d] then
    redis.call('EXPIRE', KEYS[2 * d], ttl)
  end
  total = total + started[d]
  local queued = steps[d]
  for at = 1, #queued, CHUNK do
    local last = math.min(at + CHUNK - 1, #queued)
    if redis.call('RPUSH', KEYS[2 * d + 1], unpack(queued, at, last)) == last then
      redis.call('EXPIRE', KEYS[2 * d + 1], ttl)
    end
  end
end
return total
