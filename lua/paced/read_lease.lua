-- KEYS[1] mailbox state (hash)            KEYS[5] requests in flight (zset: id -> lease expiry ms)
-- (KEYS[2]-KEYS[4], KEYS[6], KEYS[7] as in check_and_reserve.lua; passed so every call names one slot)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)   ARGV[2] request id
-- ARGV[3] requests in flight per mailbox   ARGV[4] lease ms
-- Returns {1, now}       taken: one in-flight lease for a request that sends nothing (an Inbox
--                        read for bounces); end it with release.lua ("done", no recipients)
--         {0, retry_ms}  not now: the mailbox is in a cooldown (retry_ms until it ends) or its
--                        in-flight set is full (retry_ms 1 s)
--
-- Exchange's 4 concurrent requests per app and mailbox count every request, reads too
-- (https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits), so a read takes
-- a lease in the same set as the sends and counts nothing else: no minute slot, no recipients.
-- Three to four commands.

local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local id = ARGV[2]
local max_in_flight = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
if not (now and max_in_flight and lease_ms) or id == nil or id == '' or max_in_flight < 1 then
  return redis.error_reply('ERR paced read_lease: bad ARGV (see the header)')
end
local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '0')
if cool > now then return {0, cool - now} end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
if redis.call('ZCARD', KEYS[5]) >= max_in_flight then return {0, 1000} end
if redis.call('ZADD', KEYS[5], now + lease_ms, id) == 1 and redis.call('ZCARD', KEYS[5]) == 1 then
  redis.call('PEXPIRE', KEYS[5], 86400000 + 3600000)
end
return {1, now}
