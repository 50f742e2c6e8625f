-- The fence of an ingest batch's page-view scripts (lua/session_record.lua, page_counts,
-- viewer_record): the loader runs this first in each of them, so a batch sent with an idempotency
-- record writes its page views once, whatever was retried, reloaded or arrived late. It takes the
-- first key and the first two arguments off KEYS and ARGV; the script's own header numbers what is
-- left. With a token, the first attempt to run a fenced script in this slot becomes the slot's writer
-- (SET NX, in the same step as that script's writes), and a script of any other attempt writes
-- nothing here. Every attempt of a record sends the same batch (lua/idempotency_begin.lua refuses
-- another body), so each slot's part of it is written once, by one attempt, in whatever order the
-- attempts' scripts run, whichever slots they share. Without a token, nothing is read or written.
--
-- KEYS[1]  the record's writer in this slot (string: a token); unguarded, any key of the slot, untouched
-- ARGV[1]  the attempt's token ('': unguarded)
-- ARGV[2]  the writer's TTL, seconds (>= 1): as long as the record's
-- Returns  nil, having written nothing, when another attempt is the slot's writer; else what the
--          script returns.
if #KEYS < 1 or #ARGV < 2 then
  return redis.error_reply('fence: expected the writer key, a token and a TTL')
end
local fence_writer = table.remove(KEYS, 1)
local fence_token = table.remove(ARGV, 1)
local fence_ttl = table.remove(ARGV, 1)
if fence_token ~= '' then
  -- The writer before this call (false when there was none, and this attempt now is).
  local fence_held = redis.call('SET', fence_writer, fence_token, 'NX', 'GET', 'EX', fence_ttl)
  if fence_held and fence_held ~= fence_token then
    return nil
  end
end
