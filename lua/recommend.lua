-- A user's recommended next pages in one call: the rows cached for this very session (same entries
-- and context), else computed and cached. Score of a page X: the sum over the distinct pages P of
-- the session's last M entries of weight(P) * (times X followed P) / (times any page followed P),
-- over the window's days; the session's pages are left out. Work: M x D x the next pages kept.
--
-- KEYS[1]  the user's session list (JSON entries {"path","ts"}, oldest first)
-- KEYS[2]  the cache (string: 40-digit fingerprint, then the rows as JSON)
-- KEYS[3..] 2 per day of the window: that day's transitions, that day's transition index
-- ARGV[1]  context: what besides the session the rows depend on (window, settings); fingerprinted
-- ARGV[2]  M: the latest session entries the rows start from (>= 1)
-- ARGV[3]  milliseconds the cache lives (>= 1)
-- ARGV[4]  rows kept (>= 1)
-- ARGV[5 .. 4 + M] the weight of the latest distinct page, of the one before, ... (>= 0)
-- Returns  {0} when the user has no session; else {1, rows as JSON [[page, score], ...], best first}.
local recent = tonumber(ARGV[2])
if #ARGV < 4 or recent == nil or recent < 1 or #ARGV ~= 4 + recent or #KEYS < 4 or #KEYS % 2 ~= 0 then
  return redis.error_reply('recommend: expected 2 keys and 2 per day (at least one), 4 arguments and M weights')
end
local ttl, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
if ttl == nil or ttl < 1 or keep == nil or keep < 1 then
  return redis.error_reply('recommend: TTL and rows kept must be positive numbers')
end
for k = 1, recent do
  local weight = tonumber(ARGV[4 + k])
  if weight == nil or weight < 0 then
    return redis.error_reply('recommend: weights must be numbers >= 0')
  end
end

local session, cache = KEYS[1], KEYS[2]
local entries = redis.call('LRANGE', session, 0, -1)
if #entries == 0 then
  return {0}
end
local fingerprint = redis.sha1hex(ARGV[1] .. '\n' .. table.concat(entries, '\n'))
local found = redis.call('GET', cache)
if found and string.sub(found, 1, 40) == fingerprint then
  return {1, string.sub(found, 41)}
end

-- The session's pages: every one is left out, and the distinct ones of the last M entries, latest
-- first, are where the rows start from.
local visited, pages = {}, {}
for i = #entries, 1, -1 do
  local ok, entry = pcall(cjson.decode, entries[i])
  if ok and type(entry) == 'table' and type(entry.path) == 'string' then
    if i > #entries - recent and not visited[entry.path] then
      pages[#pages + 1] = entry.path
    end
    visited[entry.path] = true
  end
end

local CHUNK = 1000 -- members per ZMSCORE, well under Lua's unpack limit
local scores = {}
for rank, page in ipairs(pages) do
  local weight = tonumber(ARGV[4 + rank])
  local from, to, skip = '[' .. page .. '\0', '(' .. page .. '\1', #page + 2
  local counts, total = {}, 0
  for day = 3, #KEYS, 2 do
    local transitions, index = KEYS[day], KEYS[day + 1]
    local steps = redis.call('ZRANGEBYLEX', index, from, to)
    for at = 1, #steps, CHUNK do
      local times = redis.call('ZMSCORE', transitions, unpack(steps, at, math.min(at + CHUNK - 1, #steps)))
      for n = 1, #times do
        local count = tonumber(times[n]) or 0
        local next_page = string.sub(steps[at + n - 1], skip)
        counts[next_page] = (counts[next_page] or 0) + count
        total = total + count
      end
    end
  end
  if total > 0 then
    for next_page, count in pairs(counts) do
      scores[next_page] = (scores[next_page] or 0) + weight * count / total
    end
  end
end

local ranked = {}
for next_page, score in pairs(scores) do
  if not visited[next_page] then
    ranked[#ranked + 1] = {next_page, score}
  end
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
redis.call('SET', cache, fingerprint .. payload, 'PX', ttl)
return {1, payload}
