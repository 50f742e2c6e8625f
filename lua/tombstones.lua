-- A prelude (store.scripts joins it before the scripts that name it) for the scripts that skip an
-- erased person (docs/privacy.md): tombstoned(tombstones, member, now) says whether the member holds
-- a tombstone that has not expired at now. A script checking many members reads the set's EXISTS
-- once and calls this only while the set exists (tombstones are rare); one checking a single member
-- calls it directly. Defines one local function; no KEYS, no ARGV.
local function tombstoned(tombstones, member, now)
  local expiry = redis.call('ZSCORE', tombstones, member)
  return expiry and tonumber(expiry) > now
end
