-- Record a batch of page views: append each to its user's navigation session (RPUSH, LTRIM to the
-- newest N, PEXPIRE to the session window) and count views, sessions started, paths and viewers.
-- A view whose RPUSH answers 1 began a new list, so it began a new session.
-- The reports' structures are kept current here, so no report ever sorts every viewer. Per period,
-- the candidates (user -> views): the ``cap`` users with the most views, ties to the greater user id
-- (byte order), as SORT ... DESC breaks ties. The counter's INCR answers the user's new count; a
-- member gets it as its score; a non-member enters when the set holds fewer than cap users, or when
-- (count, user) passes the cap-th member's, which is then trimmed. Counts only grow, so the set is
-- always the true top cap. A non-member's count is below the cap-th's, so one ZRANGE says whether a
-- viewer can enter; the set never holds more than cap users. The week's ZRANGE is skipped for a
-- week count below the day's cap-th count, which the week's cap-th count is never below. And the
-- by-name entries ("name NUL user"): the user's goes into the period's pending set (an SADD) at its
-- first view of the period, not into the million-member by-name index (an ordered insert);
-- lua/report_by_name.lua merges pending entries into the index in bounded slices. A view bringing
-- a new username removes the old entry from the index and from the pending set and adds the new
-- one to the pending set.
-- TTLs: a period's counter gets its TTL when INCR creates it (answers 1); the candidates get theirs
-- renewed when a user enters them, which is at or after that user's counter was created, so they
-- never expire before the counter of a user they list. A first view that does not enter a full set
-- of candidates (most first views, on a big site) leaves their TTL alone. The pending set holds a
-- marker besides its entries, the empty string (an entry holds a NUL, so none is empty): an SADD
-- that adds both the entry and the marker made the set, or found the marker taken by a merge, and
-- only then does the set get the period's TTL. So a pending set always has a TTL, and lives that
-- TTL (PAGE_STATS_DAYS days or more) from its first entry of the period, through the period the
-- reports read it in, at one command for most first views where an SADD and an EXPIRE were.
-- A key recreated after it expired gets its TTL back with its first write.
-- The by-name index gets its TTL from the merge that fills it. The day's counts (sessions started,
-- page views) get theirs when INCR creates them and its paths when the set is made: a per-day key
-- is written during its day (and by late events within retention), so the TTL of its first write
-- is the day's retention; a display name is SET with its TTL.
-- The day's paths keep the most viewed: when a new path takes the set past the cap plus the slack,
-- the fewest viewed are removed down to the cap. A trim removes at most slack + 1 members, once per
-- slack + 1 new paths, so the cost stays amortized O(log N) per view.
-- Transitions: a view that follows another in the same session (the list's last entry, read
-- before the RPUSH) counts previous page -> this page in the day's set of the previous page, whose
-- name is the view's stem (its 12th key) followed by that page (same {pv} slot); capped like the
-- day's paths, its TTL set when the set is made. A reload (the same page again) is not a transition.
-- A user erased and still tombstoned at now (docs/privacy.md) is skipped: nothing of theirs is
-- written. A rename keeps the former name in the user's aliases, so an erase finds the entries
-- past periods' by-name indexes still hold under it.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS     then 15 per view, in this order:
--          1 the user's session list            2 the user's views that day (string)
--          3 the user's views that week (string) 4 the user's display name (string)
--          5 sessions started that day (string)  6 page views that day (string)
--          7 views per path that day (zset)      8 the day's candidates (zset user -> views)
--          9 the week's candidates (zset)        10 the day's by-name index (zset)
--          11 the week's by-name index (zset)    12 the stem of the day's transition sets
--          13 the user's former display names (set)
--          14 the day's pending by-name entries (set) 15 the week's pending by-name entries (set)
-- ARGV[1]  session window, milliseconds
-- ARGV[2]  pages kept per session (N >= 1)
-- ARGV[3]  TTL of the per-day keys, seconds
-- ARGV[4]  TTL of the per-week keys and display names, seconds
-- ARGV[5]  paths kept per day (cap >= 1)
-- ARGV[6]  slack: new paths let in past the cap before a trim (>= 0)
-- ARGV[7]  1: count transitions, 0: do not
-- ARGV[8]  next pages kept per page and day (cap >= 1)
-- ARGV[9]  slack of that cap (>= 0)
-- ARGV[10] candidates kept per period (cap >= 1)
-- ARGV[11] now, epoch seconds
-- ARGV[12..] 4 per view: user id, entry (JSON: path and ts), path, username ('' when unknown: the
--          user id stands in until a username is known, and never replaces one)
-- Returns  the number of views that started a new session.
if #ARGV < 11 or (#ARGV - 11) % 4 ~= 0 or #KEYS ~= 1 + 15 * ((#ARGV - 11) / 4) then
  return redis.error_reply('session_record: expected 11 arguments and 1 key, then 4 arguments and 15 keys per view')
end
local window, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
local day_ttl, week_ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_paths, slack = tonumber(ARGV[5]), tonumber(ARGV[6])
local transitions, max_next, next_slack = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9])
local candidates, now = tonumber(ARGV[10]), tonumber(ARGV[11])
if window == nil or window < 1 or keep == nil or keep < 1 or day_ttl == nil or week_ttl == nil then
  return redis.error_reply('session_record: window, pages kept and TTLs must be positive numbers')
end
if max_paths == nil or max_paths < 1 or slack == nil or slack < 0 then
  return redis.error_reply('session_record: paths kept must be >= 1 and slack >= 0')
end
if max_next == nil or max_next < 1 or next_slack == nil or next_slack < 0 then
  return redis.error_reply('session_record: next pages kept must be >= 1 and their slack >= 0')
end
if candidates == nil or candidates < 1 then
  return redis.error_reply('session_record: candidates kept must be >= 1')
end
if now == nil then
  return redis.error_reply('session_record: now must be a number')
end

-- The local functions take what they use as arguments: one that names a local of the script
-- makes Redis's Lua allocate (and collect) an upvalue for it at every call.

-- INCR a counter, giving it its TTL when the INCR creates it (answers 1); returns the count.
local function incr_with_ttl(key, ttl)
  local count = redis.call('INCR', key)
  if count == 1 then
    redis.call('EXPIRE', key, ttl)
  end
  return count
end

-- Count one more ``member`` in a capped per-day sorted set (the day's paths, a page's next pages).
-- Only a new member needs more work: a trim past the cap plus the slack, or the TTL of a new set
-- (a per-day key is written during its day only, so its first write's TTL is the day's retention).
local function count_capped(key, member, cap, cap_slack, ttl)
  if tonumber(redis.call('ZINCRBY', key, 1, member)) == 1 then
    local size = redis.call('ZCARD', key)
    if size == 1 then
      redis.call('EXPIRE', key, ttl)
    elseif size > cap + cap_slack then
      redis.call('ZREMRANGEBYRANK', key, 0, -cap - 1)
    end
  end
end

-- Keep a period's candidates the top ``cap`` users by (views, user), given the user's new count
-- of views in the period. A member's score was count - 1, at least the cap-th's, so a count below
-- the cap-th's is a non-member's; one at or above it is ZADDed (a member's new score, or a
-- newcomer, after which the lowest beyond the cap leave). A count below ``floor``, a bar known to
-- be at most the cap-th's, is a non-member's too, found without reading the bar. Returns the
-- cap-th's views (nil while the set holds fewer than the cap, or when the floor answered).
local function rank(top, user, count, cap, ttl, floor)
  if floor and count < floor then
    return nil
  end
  local bar = redis.call('ZRANGE', top, -cap, -cap, 'WITHSCORES')
  local added, cap_th = 0, nil
  if bar[1] == nil then
    added = redis.call('ZADD', top, count, user)
  else
    cap_th = tonumber(bar[2])
    if count >= cap_th then
      added = redis.call('ZADD', top, count, user)
      if added == 1 then
        redis.call('ZREMRANGEBYRANK', top, 0, -cap - 1)
      end
    end
  end
  if added == 1 then
    redis.call('EXPIRE', top, ttl)
  end
  return cap_th
end

-- Add a by-name entry to a period's pending set, with the marker; the set gets its TTL when the
-- marker is new to it (the set is new, or a merge took the marker).
local function pend(pending, entry, ttl)
  if redis.call('SADD', pending, entry, '') == 2 then
    redis.call('EXPIRE', pending, ttl)
  end
end

-- A tombstoned user's views are skipped whole; the tombstones are looked up only while they exist.
local erasures = redis.call('EXISTS', KEYS[1]) == 1
local started = 0
for view = 0, (#ARGV - 11) / 4 - 1 do
  local k, a = 1 + 15 * view, 11 + 4 * view
  local user, entry, path, name = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local expiry = erasures and redis.call('ZSCORE', KEYS[1], user)
  if not (expiry and tonumber(expiry) > now) then
    if transitions then
      local last = redis.call('LINDEX', KEYS[k + 1], -1)
      if last then
        -- Only an entry of ours has a string path. An empty page would name the stem itself, and
        -- nothing can ask for its next pages anyway.
        local ok, decoded = pcall(cjson.decode, last)
        local previous = ok and type(decoded) == 'table' and decoded.path
        if type(previous) == 'string' and previous ~= path and previous ~= '' then
          count_capped(KEYS[k + 12] .. previous, path, max_next, next_slack, day_ttl)
        end
      end
    end

    if redis.call('RPUSH', KEYS[k + 1], entry) == 1 then
      started = started + 1
      incr_with_ttl(KEYS[k + 5], day_ttl)
    end
    redis.call('LTRIM', KEYS[k + 1], -keep, -1)
    redis.call('PEXPIRE', KEYS[k + 1], window)

    -- The day's bar is a floor of the week's: the day's cap candidates have at least the day's bar
    -- in views that day, so at least as many in the week, and the week's cap-th has no fewer. Below
    -- it, a view (most first views of the week, on a big site) skips the week's ZRANGE.
    local day_views = incr_with_ttl(KEYS[k + 2], day_ttl)
    local day_bar = rank(KEYS[k + 8], user, day_views, candidates, day_ttl, nil)
    local week_views = incr_with_ttl(KEYS[k + 3], week_ttl)
    rank(KEYS[k + 9], user, week_views, candidates, week_ttl, day_bar)
    -- The name the reports show: a known username, else the one already set, else the user id.
    local old
    if name == '' then
      old = redis.call('SET', KEYS[k + 4], user, 'NX', 'GET')
      name = old or user
      redis.call('EXPIRE', KEYS[k + 4], week_ttl)
    else
      old = redis.call('SET', KEYS[k + 4], name, 'EX', week_ttl, 'GET')
    end
    -- The by-name entries: the user's is pending from its first view of the period, and replaced
    -- when the name changes, wherever the old one is (index or pending set; the removals are no-ops
    -- for a period where the user is new), so the user keeps exactly one entry per period.
    local renamed = old and old ~= name
    if renamed then
      local former = old .. '\0' .. user
      redis.call('ZREM', KEYS[k + 10], former)
      redis.call('ZREM', KEYS[k + 11], former)
      redis.call('SREM', KEYS[k + 14], former)
      redis.call('SREM', KEYS[k + 15], former)
      redis.call('SADD', KEYS[k + 13], old)
      redis.call('EXPIRE', KEYS[k + 13], week_ttl)
    end
    if renamed or day_views == 1 then
      pend(KEYS[k + 14], name .. '\0' .. user, day_ttl)
    end
    if renamed or week_views == 1 then
      pend(KEYS[k + 15], name .. '\0' .. user, week_ttl)
    end

    incr_with_ttl(KEYS[k + 6], day_ttl)
    count_capped(KEYS[k + 7], path, max_paths, slack, day_ttl)
  end
end
return started
