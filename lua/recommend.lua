-- A user's recommended next pages, cached for the session they were computed from. Two calls:
-- 1. KEYS = session, cache: the cached rows when they were computed for this very session (same
--    entries) and context, else the session's last M entries, so the caller can name the transition
--    sets of those pages (a script may not name keys itself);
-- 2. KEYS = session, cache, then those sets: score, exclude, cache (only when the session is still
--    the one the first call saw) and answer.
-- Score of a page X: sum over the recent pages P of weight(P) * (times X followed P) / (times any
-- page followed P), counts summed over the window's days; pages of the session are left out.
--
-- KEYS[1]  the user's session list (JSON entries {"path","ts"}, oldest first)
-- KEYS[2]  the cache (string: 40-digit fingerprint, then the rows as JSON)
-- KEYS[3..] second call: the transition sets of each recent page, one per day, a page's days together
-- ARGV[1]  context: what besides the session the rows depend on (window, settings); fingerprinted
-- ARGV[2]  M: entries the first call returns (>= 1)
-- ARGV[3]  milliseconds the cache lives (>= 1)
-- ARGV[4]  rows kept (>= 1)
-- ARGV[5]  '' on the first call; on the second, the fingerprint the first call returned
-- ARGV[6..] second call: each recent page's weight, in the order of its sets in KEYS
-- Returns  {0} when the user has no session; {1, rows as JSON [[page, score], ...], best first};
--          or, from a first call that missed, {2, fingerprint, entry, ...} (the last M, oldest first).
local pages = #ARGV - 5
if #ARGV < 5 or #KEYS < 2 or (pages == 0) ~= (#KEYS == 2) or (pages > 0 and (#KEYS - 2) % pages ~= 0) then
  return redis.error_reply('recommend: expected 2 keys and 5 arguments, then one weight per page and its day sets')
end
local recent, ttl, keep = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if recent == nil or recent < 1 or ttl == nil or ttl < 1 or keep == nil or keep < 1 then
  return redis.error_reply('recommend: pages, TTL and rows kept must be positive numbers')
end

local entries = redis.call('LRANGE', KEYS[1], 0, -1)
if #entries == 0 then
  return {0}
end
local fingerprint = redis.sha1hex(ARGV[1] .. '\n' .. table.concat(entries, '\n'))

if pages == 0 then
  local found = redis.call('GET', KEYS[2])
  if found and string.sub(found, 1, 40) == fingerprint then
    return {1, string.sub(found, 41)}
  end
  local reply = {2, fingerprint}
  for i = math.max(1, #entries - recent + 1), #entries do
    reply[#reply + 1] = entries[i]
  end
  return reply
end

local days = (#KEYS - 2) / pages
local scores = {}
for page = 1, pages do
  local weight = tonumber(ARGV[5 + page])
  if weight == nil or weight < 0 then
    return redis.error_reply('recommend: weights must be numbers >= 0')
  end
  local counts, total = {}, 0
  for day = 1, days do
    local rows = redis.call('ZRANGE', KEYS[2 + (page - 1) * days + day], 0, -1, 'WITHSCORES')
    for i = 1, #rows, 2 do
      local count = tonumber(rows[i + 1])
      counts[rows[i]] = (counts[rows[i]] or 0) + count
      total = total + count
    end
  end
  for next_page, count in pairs(counts) do
    scores[next_page] = (scores[next_page] or 0) + weight * count / total
  end
end

for _, raw in ipairs(entries) do
  local ok, entry = pcall(cjson.decode, raw)
  if ok and type(entry) == 'table' and type(entry.path) == 'string' then
    scores[entry.path] = nil
  end
end
local ranked = {}
for next_page, score in pairs(scores) do
  ranked[#ranked + 1] = {next_page, score}
end
table.sort(ranked, function(a, b)
  if a[2] ~= b[2] then
    return a[2] > b[2]
  end
  return a[1] < b[1]
end)
local rows = {}
for i = 1, math.min(keep, #ranked) do
  rows[i] = ranked[i]
end
local payload = #rows == 0 and '[]' or cjson.encode(rows)
if ARGV[5] == fingerprint then
  redis.call('SET', KEYS[2], fingerprint .. payload, 'PX', ttl)
end
return {1, payload}
