-- KEYS[1]  minute counter key      KEYS[2]  day counter key
-- ARGV[1]  minute limit (messages) ARGV[2]  day limit (recipients)
-- ARGV[3]  recipients of this message (>= 1)
-- ARGV[4]  ms left in the current UTC minute   ARGV[5]  ms left in the current UTC day
-- Returns  {1, 0, "ok"}                       reserved: minute += 1, day += recipients
--          {0, ARGV[4], "minute"}             denied: minute counter + 1 > minute limit
--          {0, ARGV[5], "day"}                denied: day counter + recipients > day limit
--
-- Atomic check-and-reserve of one message in a mailbox's UTC-minute (messages) and UTC-day
-- (recipients) budgets, in one round trip. Checked in that order: minute first. A reservation
-- (re)sets both TTLs; a denial writes nothing, so no path leaves a key without a TTL.
-- Bad arguments are a caller bug and raise an error reply (the limiter logs scriptError).

local MINUTE_TTL_S = 120
local DAY_TTL_S = 93600

local minute_limit = tonumber(ARGV[1])
local day_limit = tonumber(ARGV[2])
local recipients = tonumber(ARGV[3])
local minute_ms_left = tonumber(ARGV[4])
local day_ms_left = tonumber(ARGV[5])
if not (minute_limit and day_limit and recipients and minute_ms_left and day_ms_left)
    or recipients < 1 then
  return redis.error_reply('ERR check_and_reserve: ARGV must be 5 numbers with recipients >= 1')
end

local minute = tonumber(redis.call('GET', KEYS[1]) or '0')
local day = tonumber(redis.call('GET', KEYS[2]) or '0')

if minute + 1 > minute_limit then
  return {0, minute_ms_left, 'minute'}
end
if day + recipients > day_limit then
  return {0, day_ms_left, 'day'}
end

redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], MINUTE_TTL_S)
redis.call('INCRBY', KEYS[2], recipients)
redis.call('EXPIRE', KEYS[2], DAY_TTL_S)
return {1, 0, 'ok'}
