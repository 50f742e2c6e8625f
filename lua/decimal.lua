-- A prelude (store.scripts joins it before the scripts that name it) for the scripts that pass a
-- caller's time to ZADD as the caller wrote it: is_decimal(text) says whether the text is a decimal
-- as Python's repr writes an epoch time (digits, an optional point and fraction, an exponent of at
-- most two digits). Redis parses every such text, so a script that checks each one before its first
-- write never has a ZADD fail after another has written. Defines one local function; no KEYS, no ARGV.
local function is_decimal(text)
  return #text <= 32
    and (string.find(text, '^%-?%d+%.?%d*$') or string.find(text, '^%-?%d+%.?%d*e[-+]%d%d?$')) ~= nil
end
