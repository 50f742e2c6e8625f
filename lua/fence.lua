-- The fence of an ingest batch's page-view scripts (lua/session_record.lua, page_counts,
-- viewer_record): the loader runs this first in each of them, so a batch sent with an idempotency
-- record writes its page views once, whatever was retried, reloaded or arrived late. It takes the
-- first key and the first argument off KEYS and ARGV; the script's own header numbers what is left.
-- With a token, a script writes only while the token is the record's writer, or while no attempt is
-- and the token holds the claim: then it makes the token the writer, in the same step as its writes.
-- The writer never changes once set, and a claim once lost never comes back to its token, so an
-- attempt's scripts all write or none does, in whatever order they run. Without one, nothing is read.
--
-- KEYS[1]  the idempotency record (hash: claim, writer, ...); unguarded, any key of the slot, unread
-- ARGV[1]  the batch's token ('': unguarded)
-- Returns  nil, having written nothing, when the batch is fenced out; else what the script returns.
if #KEYS < 1 or #ARGV < 1 then
  return redis.error_reply('fence: expected the record key and a token')
end
local fence_record = table.remove(KEYS, 1)
local fence_token = table.remove(ARGV, 1)
if fence_token ~= '' then
  local fence_held = redis.call('HMGET', fence_record, 'claim', 'writer')
  if fence_held[2] ~= fence_token then
    if fence_held[2] or fence_held[1] ~= fence_token then
      return nil
    end
    redis.call('HSET', fence_record, 'writer', fence_token)
  end
end
