-- Record the latest page of each person for "pages now" (docs/live.md): per person the time and the
-- page of the latest view, and per page how many people it is the latest page of. A view older
-- than the person's latest (a late one) changes nothing. People tombstoned at now are skipped.
-- lua/pages_now_prune.lua takes out the people gone offline.
--
-- KEYS[1]  tombstones of erased people (sorted set: person -> expiry)
-- KEYS[2]  latest view per person (sorted set: person -> ts)
-- KEYS[3]  latest page per person (hash: person -> path)
-- KEYS[4]  people per page (sorted set: path -> minus its people, so ZRANGE lists the most first
--          and ties by path)
-- ARGV[1]  now, epoch seconds
-- ARGV[2]  TTL of KEYS[2..4], seconds (>= 1): once no view came for that long, everyone is offline
-- ARGV[3..] 3 per view: person, ts, path (at most a few thousand people a call: unpack's limit)
-- Returns  the number of views that became their person's latest.
if #KEYS ~= 4 or #ARGV < 2 or (#ARGV - 2) % 3 ~= 0 then
  return redis.error_reply('pages_now_record: expected 4 keys and 2 arguments, then 3 arguments per view')
end
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('pages_now_record: now must be a number and the TTL >= 1')
end

local tombstones, latest, page, people = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- Every command is variadic over the call's people (one per path for the counts): a command from
-- Lua costs more than its work here, so a view costs a share of a few calls, not calls of its own.
local persons, seen, view_ts = {}, {}, {}
for a = 3, #ARGV, 3 do
  view_ts[a] = tonumber(ARGV[a + 1])
  if view_ts[a] == nil then
    return redis.error_reply('pages_now_record: each view ts must be a number')
  end
  if not seen[ARGV[a]] then
    seen[ARGV[a]] = true
    persons[#persons + 1] = ARGV[a]
  end
end
if #persons == 0 then
  return 0
end
local erased = redis.call('EXISTS', tombstones) == 1 and redis.call('ZMSCORE', tombstones, unpack(persons)) or {}
local stored = redis.call('ZMSCORE', latest, unpack(persons))
-- best[person]: the latest ts so far (stored, or of this call's views, in arrival order: of two
-- views at the same ts the first stays); text and path: the view that set it.
local best, text, path_of = {}, {}, {}
for n, person in ipairs(persons) do
  best[person] = (erased[n] and tonumber(erased[n]) > now) and math.huge or tonumber(stored[n]) or -math.huge
end
local moved = 0
for a = 3, #ARGV, 3 do
  local person, ts = ARGV[a], view_ts[a]
  if ts > best[person] then
    best[person], text[person], path_of[person] = ts, ARGV[a + 1], ARGV[a + 2]
    moved = moved + 1
  end
end
if moved == 0 then
  return 0
end
local movers, times = {}, {}
for _, person in ipairs(persons) do
  if text[person] then
    movers[#movers + 1] = person
    times[#times + 1] = text[person]
    times[#times + 1] = person
  end
end
-- The first write is ZADD, which Redis refuses over maxmemory: once a script has written, Redis lets
-- in the rest.
redis.call('ZADD', latest, unpack(times))
local before = redis.call('HMGET', page, unpack(movers))
-- Add ``delta`` to a page's change in minus its people. The function takes what it uses as
-- arguments: one naming a local of the script makes Lua allocate an upvalue at every call.
local function add(change, order, path, delta)
  if change[path] == nil then
    change[path] = 0
    order[#order + 1] = path
  end
  change[path] = change[path] + delta
end
local pages, change, order = {}, {}, {}
for n, person in ipairs(movers) do
  local path = path_of[person]
  if before[n] ~= path then
    if before[n] then
      add(change, order, before[n], 1)
    end
    add(change, order, path, -1)
    pages[#pages + 1] = person
    pages[#pages + 1] = path
  end
end
if #pages > 0 then
  redis.call('HSET', page, unpack(pages))
end
for _, path in ipairs(order) do
  if change[path] ~= 0 and tonumber(redis.call('ZINCRBY', people, string.format('%d', change[path]), path)) >= 0 then
    redis.call('ZREM', people, path)
  end
end
for k = 2, 4 do
  redis.call('EXPIRE', KEYS[k], ARGV[2])
end
return moved
