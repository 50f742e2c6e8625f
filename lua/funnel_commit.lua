-- Write back the funnel states of one partition's people, each only if it is still the one read
-- (compare-and-set), with the counts its views added (docs/funnels.md): the write path reads the
-- states, advances them in Python (activity/store/funnel_progress.py) and sends them here. A
-- person's state is the one in the newest of the partition's live generations holding them; a state
-- written goes into the current generation and leaves the older one. A person whose state changed
-- since it was read (another process recorded a view of theirs) is left as it is, counts and all,
-- and returned so the caller reads and advances it again; one tombstoned at now is skipped. The
-- counts of the people written are summed first, one HINCRBY per field.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  tombstones of erased people (sorted set: person -> expiry)
-- KEYS[2]  the partition's states of the current generation (hash: person -> state)
-- KEYS[3]  the partition's states of the generation before
-- KEYS[4]  the partition's states of the one before that
-- KEYS[5 ..]  the counts of C months of entry (hash: '<funnel>:<period>:<step>' -> people)
-- ARGV[1]  now, epoch seconds; ARGV[2] the current generation's TTL, seconds (>= 1); ARGV[3] C
-- then C TTLs of the counts hashes, in KEYS order (seconds, >= 1)
-- then 4 per person: the person ('u:<user>' or 'v:<visitor>'), the state read ('' for none), the
--   new state, the counts added ('<hash> <field> ...', hash 1..C: one person each)
-- Returns  the numbers (1..P) of the people whose state changed since it was read.
local G = 3 -- the generations' keys
local now, ttl, C = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if now == nil or ttl == nil or ttl < 1 or C == nil or C < 0 or #KEYS ~= 1 + G + C
    or #ARGV < 3 + C or (#ARGV - 3 - C) % 4 ~= 0 then
  return redis.error_reply('funnel_commit: expected now, a TTL >= 1 and C; 4 + C keys, C TTLs and 4 arguments per person')
end
local people_at, P = 4 + C, (#ARGV - 3 - C) / 4
local people = {}
for p = 1, P do
  people[p] = ARGV[people_at + 4 * (p - 1)]
end
local erasures = redis.call('EXISTS', KEYS[1]) == 1
-- Each person's state, and the generation holding it: one HMGET per generation of the people not
-- found in a newer one (from Lua, a command per person costs more than its work).
local states, home, missing = {}, {}, {}
for p = 1, P do
  missing[p] = p
end
for g = 1, G do
  if #missing == 0 then
    break
  end
  local names = {}
  for i, p in ipairs(missing) do
    names[i] = people[p]
  end
  local found, still = redis.call('HMGET', KEYS[1 + g], unpack(names)), {}
  for i, p in ipairs(missing) do
    if found[i] then
      states[p], home[p] = found[i], g
    else
      still[#still + 1] = p
    end
  end
  missing = still
end
local added, changed, written = {}, {}, {}
for h = 1, C do
  added[h] = {}
end
-- Every check first, then the writes: a bad argument leaves everything as it was.
for p = 1, P do
  local at = people_at + 4 * (p - 1)
  if not (erasures and tombstoned(KEYS[1], people[p], now)) then
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
if #written > 0 then
  local current, leaving = {}, {}
  for g = 2, G do
    leaving[g] = {}
  end
  for _, p in ipairs(written) do
    current[#current + 1] = people[p]
    current[#current + 1] = ARGV[people_at + 4 * (p - 1) + 2]
    if home[p] and home[p] > 1 then
      leaving[home[p]][#leaving[home[p]] + 1] = people[p]
    end
  end
  redis.call('HSET', KEYS[2], unpack(current))
  redis.call('EXPIRE', KEYS[2], ARGV[2])
  for g = 2, G do
    if #leaving[g] > 0 then
      redis.call('HDEL', KEYS[1 + g], unpack(leaving[g]))
    end
  end
end
for h = 1, C do
  if next(added[h]) then
    for field, counted in pairs(added[h]) do
      redis.call('HINCRBY', KEYS[1 + G + h], field, string.format('%d', counted))
    end
    redis.call('EXPIRE', KEYS[1 + G + h], ARGV[3 + h])
  end
end
return changed
