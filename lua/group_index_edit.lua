-- Add a group's id to users' entries in the user -> groups index, or take it out (store.groups): an
-- entry holds the ids of the groups whose built views list the user, comma-separated, so a batch
-- reads its users' entries with one HMGET a call. An entry left with no id is deleted. An add
-- lengthens the index's TTL to at least ARGV[3], never shortens it.
--
-- KEYS[1]  the index (hash: user -> "id,id,...")
-- ARGV[1]  the group id (no comma)
-- ARGV[2]  1: add it, 0: take it out
-- ARGV[3]  seconds the index lives at least after an add (>= 1)
-- ARGV[4..] the users
-- Returns  the number of entries changed.
local group, adding, ttl = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
if #KEYS ~= 1 or #ARGV < 3 or group == '' or string.find(group, ',', 1, true) or ttl == nil or ttl < 1 then
  return redis.error_reply('group_index_edit: expected the index, a group id, 1 or 0, a TTL >= 1 and users')
end
local index = KEYS[1]
local changed = 0
for i = 4, #ARGV do
  local entry = redis.call('HGET', index, ARGV[i])
  local ids, found = {}, false
  for id in string.gmatch(entry or '', '[^,]+') do
    if id == group then
      found = true
    else
      ids[#ids + 1] = id
    end
  end
  if adding and not found then
    ids[#ids + 1] = group
  end
  if adding ~= found then
    changed = changed + 1
    if #ids > 0 then
      redis.call('HSET', index, ARGV[i], table.concat(ids, ','))
    else
      redis.call('HDEL', index, ARGV[i])
    end
  end
end
if adding then
  redis.call('EXPIRE', index, ttl, 'NX')
  redis.call('EXPIRE', index, ttl, 'GT')
end
return changed
