-- Append one day's page views of a batch to their users' navigation sessions: per view RPUSH, LTRIM
-- to the newest N and PEXPIRE to the session window, so a user idle for longer than the window
-- starts a new session. A view whose RPUSH answers 1 began a new list, so it began a session: those
-- are counted in the day's sessions-started counter (one INCRBY per call; the counter gets its TTL
-- when the INCRBY creates it).
-- Transitions: a view that follows another in the same session (the list's last entry, read
-- before the RPUSH) counts previous page -> this page in the day's set of the previous page (the
-- stem KEYS[3] followed by that page), capped at the most frequent: when a new next page takes the
-- set past the cap plus the slack, the least frequent are removed down to the cap (at most slack + 1
-- members, once per slack + 1 new ones: amortized O(log N) a view). A set gets its TTL when made:
-- a per-day key is written during its day (and by late events within retention), so the TTL of its
-- first write is the day's retention. A reload (the same page again) is not a transition.
-- A user erased and still tombstoned at now (docs/privacy.md) is skipped: nothing of theirs is
-- written.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  sessions started that day (string counter)
-- KEYS[3]  the stem of the day's transition sets
-- KEYS[4..] one session list per view (a user's list once per view of theirs)
-- ARGV[1]  session window, milliseconds (>= 1)
-- ARGV[2]  pages kept per session (N >= 1)
-- ARGV[3]  TTL of the day's keys, seconds (>= 1)
-- ARGV[4]  1: count transitions, 0: do not
-- ARGV[5]  next pages kept per page and day (cap >= 1)
-- ARGV[6]  slack of that cap (>= 0)
-- ARGV[7]  now, epoch seconds
-- ARGV[8..] 3 per view, in the order of the session lists: user id, entry (JSON: path and ts), path
-- Returns  the number of views that started a new session.
local views = #KEYS - 3
if #KEYS < 3 or #ARGV ~= 7 + 3 * views then
  return redis.error_reply('session_record: expected 3 keys and 7 arguments, then a key and 3 arguments per view')
end
local window, keep, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local transitions, max_next, slack = ARGV[4] == '1', tonumber(ARGV[5]), tonumber(ARGV[6])
local now = tonumber(ARGV[7])
if window == nil or window < 1 or keep == nil or keep < 1 or ttl == nil or ttl < 1 then
  return redis.error_reply('session_record: window, pages kept and TTL must be positive numbers')
end
if max_next == nil or max_next < 1 or slack == nil or slack < 0 or now == nil then
  return redis.error_reply('session_record: next pages kept must be >= 1, their slack >= 0 and now a number')
end

local tombstones, started_counter, stem = KEYS[1], KEYS[2], KEYS[3]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local started = 0
for i = 1, views do
  local session, a = KEYS[3 + i], 7 + 3 * (i - 1)
  local user, entry, path = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  if not (expiry and tonumber(expiry) > now) then
    if transitions then
      local last = redis.call('LINDEX', session, -1)
      if last then
        -- Only an entry of ours has a string path. An empty page would name the stem itself, and
        -- nothing can ask for its next pages anyway.
        local ok, decoded = pcall(cjson.decode, last)
        local previous = ok and type(decoded) == 'table' and decoded.path
        if type(previous) == 'string' and previous ~= path and previous ~= '' then
          local after = stem .. previous
          if tonumber(redis.call('ZINCRBY', after, 1, path)) == 1 then
            local size = redis.call('ZCARD', after)
            if size == 1 then
              redis.call('EXPIRE', after, ttl)
            elseif size > max_next + slack then
              redis.call('ZREMRANGEBYRANK', after, 0, -max_next - 1)
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
