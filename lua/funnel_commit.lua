-- Write back the funnel states of one partition's people, each only if it is still the one read
-- (compare-and-set), with the counts its views added (docs/funnels.md): the write path reads the
-- states, advances them in Python (activity/store/funnel_progress.py) and sends them here. A person
-- whose state changed since it was read (another process recorded a view of theirs) is left as it
-- is, counts and all, and returned so the caller reads and advances it again; one tombstoned at now
-- is skipped. The counts of the people written are summed first, one HINCRBY per field.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  tombstones of erased people (sorted set: person -> expiry)
-- KEYS[2 .. 1+P]  each person's state (string)
-- KEYS[2+P ..]  the counts of C months of entry (hash: '<funnel>:<period>:<step>' -> people)
-- ARGV[1]  now, epoch seconds; ARGV[2] the states' TTL, seconds (>= 1); ARGV[3] P; ARGV[4] C
-- then C TTLs of the counts hashes, in KEYS order (seconds, >= 1)
-- then 4 per person, in KEYS order: the person ('u:<user>' or 'v:<visitor>'), the state read ('' for
--   none), the new state, the counts added ('<hash> <field> ...', hash 1..C: one person each)
-- Returns  the numbers (1..P) of the people whose state changed since it was read.
local now, ttl, P, C = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if now == nil or ttl == nil or ttl < 1 or P == nil or C == nil or #KEYS ~= 1 + P + C
    or #ARGV ~= 4 + C + 4 * P then
  return redis.error_reply('funnel_commit: expected now, a TTL >= 1, P and C; 1 + P + C keys, C TTLs and 4 arguments per person')
end
local people_at = 5 + C
local erasures = redis.call('EXISTS', KEYS[1]) == 1
-- Every person's state in one MGET: from Lua, a command per person costs more than its work.
local states = P > 0 and redis.call('MGET', unpack(KEYS, 2, 1 + P)) or {}
local added, changed, written = {}, {}, {}
for h = 1, C do
  added[h] = {}
end
-- Every check first, then the writes: a bad argument leaves everything as it was.
for p = 1, P do
  local at = people_at + 4 * (p - 1)
  if not (erasures and tombstoned(KEYS[1], ARGV[at], now)) then
    if (states[p] or '') ~= ARGV[at + 1] then
      changed[#changed + 1] = p
    else
      written[#written + 1] = p
      for h, field in string.gmatch(ARGV[at + 3], '(%d+) (%S+)') do
        local fields = added[tonumber(h)]
        if fields == nil then
          return redis.error_reply('funnel_commit: a count names a hash past C')
        end
        fields[field] = (fields[field] or 0) + 1
      end
    end
  end
end
for _, p in ipairs(written) do
  redis.call('SET', KEYS[1 + p], ARGV[people_at + 4 * (p - 1) + 2], 'EX', ARGV[2])
end
for h = 1, C do
  if next(added[h]) then
    for field, people in pairs(added[h]) do
      redis.call('HINCRBY', KEYS[1 + P + h], field, string.format('%d', people))
    end
    redis.call('EXPIRE', KEYS[1 + P + h], ARGV[4 + h])
  end
end
return changed
