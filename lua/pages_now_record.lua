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
-- ARGV[3..] 3 per view: person, ts (a decimal as Python's repr writes it), path (at most a few
--          thousand people a call: unpack's limit)
-- Returns  the number of views that became their person's latest.
-- Prelude: lua/decimal.lua (is_decimal).
-- Prelude: lua/tombstones.lua (tombstoned).
if #KEYS ~= 4 or #ARGV < 2 or (#ARGV - 2) % 3 ~= 0 then
  return redis.error_reply('pages_now_record: expected 4 keys and 2 arguments, then 3 arguments per view')
end
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('pages_now_record: now must be a number and the TTL >= 1')
end
-- Every time is checked before the first write, so a bad one changes nothing.
for a = 4, #ARGV, 3 do
  if not is_decimal(ARGV[a]) then
    return redis.error_reply('pages_now_record: each view ts must be a number')
  end
end

local tombstones, latest, page, people = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- A ZADD GT CH per view moves its person's time forward only and answers whether it moved (so, of
-- two views at the same ts, the first stays), with no stored time read back: a ZMSCORE's times,
-- formatted into its reply and parsed again in Lua, cost more than these commands (as in
-- lua/zadd_unless_smaller.lua). The pages and the counts move once per call: one HMGET, one HSET
-- and a ZINCRBY per page whose people changed.
-- The first write is a ZADD, which Redis refuses over maxmemory: once a script has written, Redis
-- lets in the rest. The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
-- path_of[person]: the page of the view that moved them last, their latest; movers in first-move order.
local moved, movers, path_of = 0, {}, {}
for a = 3, #ARGV, 3 do
  local person = ARGV[a]
  if not (erasures and tombstoned(tombstones, person, now))
      and redis.call('ZADD', latest, 'GT', 'CH', ARGV[a + 1], person) == 1 then
    if path_of[person] == nil then
      movers[#movers + 1] = person
    end
    path_of[person] = ARGV[a + 2]
    moved = moved + 1
  end
end
if moved == 0 then
  return 0
end
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
