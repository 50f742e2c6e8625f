-- A prelude (store.scripts joins it before the scripts that name it) for the scripts that read a
-- session list: entry_parts(entry) gives the path and ts of an entry as store.sessions.entry writes
-- it, the ts as Python's repr writes it, a space, then the path ("1733140000.25 /pricing"); nil, nil
-- for one that is not ours. An entry starting with "{" is an earlier release's JSON {"path", "ts"},
-- which a session open at the upgrade holds until it ends. Defines one local function; no KEYS, no
-- ARGV.
local function entry_parts(entry)
  if string.sub(entry, 1, 1) == '{' then
    local ok, decoded = pcall(cjson.decode, entry)
    if ok and type(decoded) == 'table' and type(decoded.path) == 'string' and type(decoded.ts) == 'number' then
      return decoded.path, decoded.ts
    end
    return nil, nil
  end
  local space = string.find(entry, ' ', 1, true)
  local ts = space and tonumber(string.sub(entry, 1, space - 1))
  if ts == nil then
    return nil, nil
  end
  return string.sub(entry, space + 1), ts
end
