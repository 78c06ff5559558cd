-- KEYS[1] mailbox state (hash)
-- ARGV[1] now (ms)   ARGV[2] cooldown until (ms)
-- Returns the cooldown in force after the call (ms since the epoch)
--
-- A provider's Retry-After for this mailbox (a 429 or 503 seen by any replica): every message
-- of the mailbox waits until then, and the next free slot moves behind it, so bookings made
-- later queue up after the cooldown, spaced as usual. Never shortens a cooldown in force.

local now = tonumber(ARGV[1])
local until_ms = tonumber(ARGV[2])
if not (now and until_ms) then
  return redis.error_reply('ERR paced cooldown: bad ARGV (see the header)')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0   -- not seeded yet: the next check seeds it; nothing to hold
end
local cool = math.max(tonumber(redis.call('HGET', KEYS[1], 'cool') or '0'), until_ms)
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], 'tat') or '0'), cool)
redis.call('HSET', KEYS[1], 'cool', cool, 'tat', tat)
redis.call('PEXPIRE', KEYS[1], 86400000 + 3600000)
return cool
