-- Move one key a release before the {ses} tag kept under {pv} (a session, a user's linked
-- visitors, a day's sessions started, transitions or transition index) into the key this release
-- keeps, from the former key's DUMP: restored as it was where this release holds none yet, else
-- merged, counters added up (sum), a visitor's sign-in at its later time and index members once
-- (max), a session this release began kept as it is (keep), the longer of the two TTLs kept. The
-- marker makes a repeat change nothing, so the caller deletes the former key only after this call.
--
-- KEYS[1]  the key this release keeps (string, sorted set or list)
-- KEYS[2]  the marker that the former key was moved (string), kept as long as the former key was
-- KEYS[3]  scratch for a merge (the former key restored), deleted before the call returns
-- ARGV[1]  the former key's DUMP payload
-- ARGV[2]  its TTL, milliseconds (>= 1)
-- ARGV[3]  how: 'sum', 'max' or 'keep'
-- Returns  1 when moved, 0 when moved before.
if #KEYS ~= 3 or #ARGV ~= 3 then
  return redis.error_reply('session_key_move: expected 3 keys and 3 arguments')
end
local kept, moved, scratch = KEYS[1], KEYS[2], KEYS[3]
local ttl, how = tonumber(ARGV[2]), ARGV[3]
if ttl == nil or ttl < 1 or ttl % 1 ~= 0 or (how ~= 'sum' and how ~= 'max' and how ~= 'keep') then
  return redis.error_reply("session_key_move: the TTL must be an integer >= 1, how 'sum', 'max' or 'keep'")
end
if redis.call('EXISTS', moved) == 1 then
  return 0
end
if redis.call('EXISTS', kept) == 0 then
  redis.call('RESTORE', kept, ARGV[2], ARGV[1])
elseif how ~= 'keep' then
  redis.call('RESTORE', scratch, ARGV[2], ARGV[1], 'REPLACE')
  local longest = math.max(redis.call('PTTL', kept), ttl)
  if redis.call('TYPE', scratch)['ok'] == 'string' then
    redis.call('INCRBY', kept, redis.call('GET', scratch))
  else
    redis.call('ZUNIONSTORE', kept, '2', kept, scratch, 'AGGREGATE', how)
  end
  redis.call('DEL', scratch)
  redis.call('PEXPIRE', kept, string.format('%d', longest))
end
redis.call('SET', moved, '1', 'PX', ARGV[2])
return 1
