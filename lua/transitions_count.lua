-- Count the page transitions lua/session_record.lua queued on one day, in the order they were
-- queued: "+A NUL B" counts A -> B in the day's two sets, "-A NUL B" takes one count back (at 0
-- the step leaves both; one not found, trimmed or never counted, is left alone: never created,
-- never negative). Past each cap plus its slack the least frequent are trimmed (amortized O(log N) a
-- step). At most a bound of steps per call, so a call's work is bounded whatever was queued; what
-- is left waits for the next call. Not fenced: it counts what a session script queued, once.
--
-- KEYS[1]  the day's steps queued (list)
-- KEYS[2]  the day's transitions
-- KEYS[3]  the day's transition index
-- KEYS[4]  scratch for a page's trim (sorted set), deleted before the call returns
-- ARGV[1]  TTL of the day's sets, seconds (>= 1)
-- ARGV[2]  next pages kept per page (>= 1), ARGV[3] the slack of that cap (>= 0)
-- ARGV[4]  steps kept per day (>= 1), ARGV[5] the slack of that cap (>= 0)
-- ARGV[6]  steps counted at most (>= 1)
-- Returns  the number of queued steps taken.
if #KEYS ~= 4 or #ARGV ~= 6 then
  return redis.error_reply('transitions_count: expected 4 keys and 6 arguments')
end
local ttl, max_next, next_slack = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local max_steps, steps_slack, bound = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if ttl == nil or ttl < 1 or max_next == nil or max_next < 1 or next_slack == nil or next_slack < 0
    or max_steps == nil or max_steps < 1 or steps_slack == nil or steps_slack < 0 or bound == nil or bound < 1 then
  return redis.error_reply('transitions_count: the TTL, caps and bound must be >= 1 and the slacks >= 0')
end

local CHUNK = 1000 -- members per variadic command, well under Lua's unpack limit

-- The local functions take what they use as arguments: one that names a local of the script makes
-- Redis's Lua allocate (and collect) an upvalue for it at every call.

-- ZREM ``members`` from ``key``, a chunk per command.
local function remove(key, members)
  for at = 1, #members, CHUNK do
    redis.call('ZREM', key, unpack(members, at, math.min(at + CHUNK - 1, #members)))
  end
end

-- Keep the ``cap`` most frequent steps of the day: the least frequent (ties: the lowest member)
-- leave both sets.
local function trim_day(counts, index, cap)
  local gone = redis.call('ZRANGE', counts, 0, -cap - 1)
  redis.call('ZREMRANGEBYRANK', counts, 0, -cap - 1)
  remove(index, gone)
end

-- Keep the ``cap`` most frequent steps from one page (its index range ``from``..``to``): its steps
-- copied to ``scratch`` (scores 0) and scored there by their counts (an intersection with the
-- counts adds them), so the set lists the least frequent first, ties to the lowest member, as the
-- index orders them; those past the cap leave both sets. Redis's commands sort them: no score
-- crosses into Lua.
local function trim_page(counts, index, scratch, from, to, cap)
  redis.call('ZRANGESTORE', scratch, index, from, to, 'BYLEX')
  local size = redis.call('ZINTERSTORE', scratch, '2', scratch, counts)
  local gone = size > cap and redis.call('ZRANGE', scratch, '0', string.format('%d', size - cap - 1)) or {}
  redis.call('DEL', scratch)
  remove(counts, gone)
  remove(index, gone)
end

-- Count ``step`` (from NUL to, its page ``from``) in a day's two sets (``caps``: ttl, max_next,
-- next_slack, max_steps, steps_slack), trimming past the caps.
local function count(counts, index, scratch, step, from, caps)
  if tonumber(redis.call('ZINCRBY', counts, '1', step)) ~= 1 then
    return
  end
  redis.call('ZADD', index, '0', step)
  local size = redis.call('ZCARD', counts)
  if size == 1 then
    redis.call('EXPIRE', counts, caps.ttl)
    redis.call('EXPIRE', index, caps.ttl)
  elseif size > caps.max_steps + caps.steps_slack then
    trim_day(counts, index, caps.max_steps)
  end
  local low, high = '[' .. from .. '\0', '(' .. from .. '\1'
  if redis.call('ZLEXCOUNT', index, low, high) > caps.max_next + caps.next_slack then
    trim_page(counts, index, scratch, low, high, caps.max_next)
  end
end

-- Take back one count of ``step`` from a day's two sets.
local function take_back(counts, index, step)
  local times = tonumber(redis.call('ZSCORE', counts, step))
  if times == nil then
    return
  end
  if times <= 1 then
    redis.call('ZREM', counts, step)
    redis.call('ZREM', index, step)
  else
    redis.call('ZINCRBY', counts, '-1', step)
  end
end

local caps = {
  ttl = ttl, max_next = max_next, next_slack = next_slack, max_steps = max_steps, steps_slack = steps_slack,
}
local counts, index, scratch = KEYS[2], KEYS[3], KEYS[4]
local queued = redis.call('LPOP', KEYS[1], ARGV[6]) or {}
for _, item in ipairs(queued) do
  local step = string.sub(item, 2)
  local cut = string.find(step, '\0', 1, true)
  if cut and string.sub(item, 1, 1) == '+' then
    count(counts, index, scratch, step, string.sub(step, 1, cut - 1), caps)
  elseif cut then
    take_back(counts, index, step)
  end
end
return #queued
