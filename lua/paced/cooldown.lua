-- KEYS[1] mailbox state (hash)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)   ARGV[2] wait (ms, relative)
-- Returns the cooldown in force after the call (ms since the epoch), 0 when not seeded
--
-- A provider's Retry-After for this mailbox (a 429 or 503 seen by any replica): every message
-- of the mailbox waits until now + wait, and the next free slot moves behind it, so bookings
-- made later queue up after the cooldown, spaced as usual. Never shortens a cooldown in force.
-- The wait is relative so that the cooldown is on the same clock as every other decision.

local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local wait = tonumber(ARGV[2])
if not (now and wait) then
  return redis.error_reply('ERR paced cooldown: bad ARGV (see the header)')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0   -- not seeded yet: the next check seeds it; nothing to hold
end
local cool = math.max(tonumber(redis.call('HGET', KEYS[1], 'cool') or '0'), now + wait)
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], 'tat') or '0'), cool)
redis.call('HSET', KEYS[1], 'cool', cool, 'tat', tat)
redis.call('PEXPIRE', KEYS[1], 86400000 + 3600000)
return cool
