-- Keep a visitor's latest page views as their current navigation session, so a sign-in can move
-- them into the user's (docs/visitors.md#signing-in). A visitor's session is only this list: no
-- statistics, no transitions. RPUSH the entries (oldest first), LTRIM to the newest N, PEXPIRE the
-- window: idle past the window, the list and the session are gone.
--
-- KEYS[1]  the visitor's session (list of entries, oldest first)
-- ARGV[1]  session window, milliseconds (>= 1)
-- ARGV[2]  pages kept (N >= 1)
-- ARGV[3..]  the entries (store.sessions.entry), oldest first (at most N)
-- Returns  the length of the list.
if #KEYS ~= 1 or #ARGV < 3 then
  return redis.error_reply('visitor_session_record: expected 1 key; window, pages kept and entries')
end
local window, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
if window == nil or window < 1 or keep == nil or keep < 1 or #ARGV - 2 > keep then
  return redis.error_reply('visitor_session_record: window and pages kept must be >= 1, at most N entries')
end
local length = redis.call('RPUSH', KEYS[1], unpack(ARGV, 3))
if length > keep then
  redis.call('LTRIM', KEYS[1], string.format('%d', -keep), '-1')
  length = keep
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return length
