-- Prepended to the paced scripts that take a now (`src/rate_limit/paced/mod.rs`): `arg` (ARGV[1])
-- as ms since the epoch, or `TIME`: Redis's own clock (seconds, microseconds) in ms.
local function now_ms(arg)
  if arg == 'TIME' then
    local t = redis.call('TIME')
    return t[1] * 1000 + math.floor(t[2] / 1000)
  end
  return tonumber(arg)
end

