-- Advance people through the funnels with a batch's page views (docs/funnels.md), one partition's
-- people per call. A person's state is one string, '<t>|<ids>|<progress>':
--   t         the time of the latest view taken for the person: one older arriving later is left
--             out of every funnel (the key exists once the person entered a funnel)
--   ids       ',<id>,<id>,': the strict funnels with a chain in progress, so a view that matches
--             no step decodes the progress only when one of them must end
--   progress  JSON, per funnel id {p, c}:
--             p  per period of an entry (d:YYYYMMDD, w:YYYYWww, m:YYYYMM), the highest step the
--                person is counted at there, so each person counts once per step and period
--             c  the chains in progress, {level, entry ts, entry day, week, month}: after level k
--                of steps matched from an entry, one per level and entry day, the latest entry (it
--                reaches as far as any earlier one of its day, and counts in the same periods)
-- A sequential funnel moves on with the views matching one of its steps; a strict one, while a chain
-- is in progress, with every view: a chain that the next view does not advance ends. Reaching step
-- k counts the person at k in the day, week and month of the chain's entry, in the counts hash of
-- the entry's month: the call's counts are summed first, one HINCRBY per field. People tombstoned
-- at now are skipped.
--
-- KEYS[1]  tombstones of erased people (sorted set: person -> expiry)
-- KEYS[2 .. 1+P]  each person's state (string)
-- KEYS[2+P ..]  the counts of each month of entry (hash: '<funnel>:<period>:<step>' -> people)
-- ARGV[1]  now, epoch seconds
-- ARGV[2]  TTL of a person's state, seconds (the longest window of the funnels, plus a month)
-- ARGV[3], ARGV[4], ARGV[5], ARGV[6]  F funnels, P people, C counts hashes, D days
-- then 4 per funnel: id, mode ('strict' or 'sequential'), window (s), steps
-- then 2 per counts hash, in KEYS order: month (m:YYYYMM), TTL (s)
-- then 3 per day of the views: its day, week and month (d:YYYYMMDD, w:YYYYWww, m:YYYYMM)
-- then P people, in KEYS order: each person's id ('u:<user>' or 'v:<visitor>')
-- then 4 per view, in arrival order: person number (1..P), ts, day number (1..D), matches
--   ('f.s f.s ...': funnel number f's step s matches the view's path)
-- Returns  the people counted at a step, summed over steps and periods.
local now, state_ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local F, P, C, D = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if now == nil or state_ttl == nil or state_ttl < 1 or F == nil or P == nil or C == nil or D == nil
    or #KEYS ~= 1 + P + C then
  return redis.error_reply('funnel_advance: expected now, a TTL >= 1, F, P, C and D, then 1 + P + C keys')
end
local counts_at = 7 + 4 * F
local days_at = counts_at + 2 * C
local people_at = days_at + 3 * D
local views_at = people_at + P
if #ARGV < views_at - 1 or (#ARGV - views_at + 1) % 4 ~= 0 then
  return redis.error_reply('funnel_advance: expected 4 arguments per funnel, 2 per counts hash, 3 per day, '
    .. '1 per person, 4 per view')
end

local funnels = {}
for f = 1, F do
  local at = 7 + 4 * (f - 1)
  local window, steps = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  if window == nil or steps == nil then
    return redis.error_reply('funnel_advance: window and steps must be numbers')
  end
  funnels[f] = {id = ARGV[at], strict = ARGV[at + 1] == 'strict', window = window, steps = steps}
end
local counts = {}  -- month -> {key, ttl, added = field -> people}
for i = 1, C do
  counts[ARGV[counts_at + 2 * (i - 1)]] = {key = KEYS[1 + P + i], ttl = ARGV[counts_at + 2 * i - 1], added = {}}
end
local days = {}
for d = 1, D do
  local at = days_at + 3 * (d - 1)
  days[d] = {ARGV[at], ARGV[at + 1], ARGV[at + 2]}
end

-- Count the person at every step past the one they are counted at in the chain's entry periods.
local function count(id, progress, chain, level)
  local added = counts[chain[5]].added
  for period = 3, 5 do
    local name = chain[period]
    local was = progress.p[name] or 0
    for step = was + 1, level do
      local field = id .. ':' .. name .. ':' .. step
      added[field] = (added[field] or 0) + 1
    end
    if was < level then
      progress.p[name] = level
    end
  end
end

-- One view taken by one funnel: the chains it advances (a strict funnel's others end), a new one
-- when it matches step 1; then the latest entry per level and day, and the periods still needed.
local function take(funnel, progress, ts, day, matched)
  local kept, best = {}, {}
  local function keep(chain)
    local slot = chain[1] .. chain[3]
    local other = best[slot]
    if other == nil then
      kept[#kept + 1] = chain
      best[slot] = #kept
    elseif kept[other][2] < chain[2] then
      kept[other] = chain
    end
  end
  for _, chain in ipairs(progress.c) do
    if chain[2] + funnel.window >= ts then
      local level = chain[1] + 1
      if matched[level] then
        local moved = {level, chain[2], chain[3], chain[4], chain[5]}
        count(funnel.id, progress, moved, level)
        if level < funnel.steps then
          keep(moved)
        end
      elseif not funnel.strict then
        keep(chain)
      end
    end
  end
  if matched[1] then
    local entry = {1, ts, day[1], day[2], day[3]}
    count(funnel.id, progress, entry, 1)
    keep(entry)
  end
  local needed = {[day[1]] = true, [day[2]] = true, [day[3]] = true}
  for _, chain in ipairs(kept) do
    needed[chain[3]], needed[chain[4]], needed[chain[5]] = true, true, true
  end
  for name in pairs(progress.p) do
    if not needed[name] then
      progress.p[name] = nil
    end
  end
  progress.c = kept
end

local erasures = redis.call('EXISTS', KEYS[1]) == 1
-- Every person's state in one MGET: from Lua, a command per person costs more than its work.
local states = P > 0 and redis.call('MGET', unpack(KEYS, 2, 1 + P)) or {}

-- A person's state as read: t (nil: none yet), the strict funnels in progress and the progress,
-- still encoded; skip for one erased.
local function load(p)
  local expiry = erasures and redis.call('ZSCORE', KEYS[1], ARGV[people_at - 1 + p])
  if expiry and tonumber(expiry) > now then
    return {skip = true}
  end
  local found = states[p]
  if not found then
    return {ids = ',', raw = '{}'}
  end
  local a = string.find(found, '|', 1, true)
  local b = string.find(found, '|', a + 1, true)
  return {t = tonumber(string.sub(found, 1, a - 1)), ids = string.sub(found, a + 1, b - 1), raw = string.sub(found, b + 1)}
end

local people = {}
for at = views_at, #ARGV, 4 do
  local p, ts, day = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), days[tonumber(ARGV[at + 2])]
  if p == nil or p < 1 or p > P or ts == nil or day == nil then
    return redis.error_reply('funnel_advance: a view needs a person and a day number of the call and a ts')
  end
  local person = people[p]
  if person == nil then
    person = load(p)
    people[p] = person
  end
  local matches, enters = nil, false
  for f, step in string.gmatch(ARGV[at + 3], '(%d+)%.(%d+)') do
    f, step = tonumber(f), tonumber(step)
    matches = matches or {}
    matches[f] = matches[f] or {}
    matches[f][step] = true
    enters = enters or step == 1
  end
  if not person.skip and (person.t and ts >= person.t or person.t == nil and enters) then
    person.t, person.t_arg = ts, ARGV[at + 1]
    if matches or person.progress or person.ids ~= ',' then
      person.progress = person.progress or cjson.decode(person.raw)
      for f = 1, F do
        local funnel, matched = funnels[f], matches and matches[f]
        local progress = person.progress[funnel.id]
        if progress == nil and matched and matched[1] then
          progress = {p = {}, c = {}}
          person.progress[funnel.id] = progress
        end
        if progress and (matched or funnel.strict and #progress.c > 0) then
          take(funnel, progress, ts, day, matched or {})
        end
      end
    end
  end
end

-- The states written back: a decoded progress without the funnels no longer defined, and the
-- strict funnels with a chain in progress; each for the TTL.
local defined = {}
for f = 1, F do
  defined[funnels[f].id] = funnels[f]
end
for p, person in pairs(people) do
  if person.t_arg then
    if person.progress then
      local ids = {''}
      for id, progress in pairs(person.progress) do
        if not defined[id] then
          person.progress[id] = nil
        elseif defined[id].strict and #progress.c > 0 then
          ids[#ids + 1] = id
        end
      end
      ids[#ids + 1] = ''
      person.ids, person.raw = table.concat(ids, ','), cjson.encode(person.progress)
    end
    redis.call('SET', KEYS[1 + p], person.t_arg .. '|' .. person.ids .. '|' .. person.raw, 'EX', ARGV[2])
  end
end
local counted = 0
for _, hash in pairs(counts) do
  for field, people_counted in pairs(hash.added) do
    redis.call('HINCRBY', hash.key, field, string.format('%d', people_counted))
    counted = counted + people_counted
  end
  if next(hash.added) then
    redis.call('EXPIRE', hash.key, hash.ttl)
  end
end
return counted
