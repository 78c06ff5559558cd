-- KEYS[1]-KEYS[5] the mailbox's keys (not touched; passed so every call names one slot)
-- KEYS[6] tenant state (hash)             KEYS[7] tenant day buckets (zset)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)
-- ARGV[2] the tenant's external recipients per rolling 24 h
-- ARGV[3] optional: `window` (default: fill the window up to the limit) or `whole` (add the
--         whole limit now: no external recipient fits until now + 24 h)
-- Returns {added, free_at}: the external recipients added to the current minute's bucket so the
-- window holds the whole budget, and when the first external recipient fits again (ms)
--
-- Exchange answered `550 5.7.233` (the tenant is over its external recipient rate limit): its
-- count is higher than ours (other senders of the tenant, or a budget set too high). The budget
-- learns from it: the window is filled up to the limit now, so every new external message is
-- booked (reason `tenant`) for when the window frees, which it does as the recipients we
-- counted leave it (the filler itself leaves 24 h from now). Buckets out of the window are
-- evicted first, as check_and_reserve.lua does. A tenant without state yet starts full.
-- Bookings of external recipients made before it would still be honoured without a second
-- check: the tenant is also held (field `held`) until the first external recipient fits again,
-- and check_and_reserve.lua drops such a booking before it and books it again behind it.
-- `whole` (5.7.705 / 5.7.708 / 5.7.501: the tenant is blocked, or a new tenant's IPs are; Microsoft
-- gives no end): the whole limit is added now, so external mail waits 24 h, however little we
-- counted (docs/decisions/0032-quota-ndrs-pause.md).

local BUCKET_MS = 60000
local DAY_MS = 86400000
local KEY_TTL_MS = DAY_MS + 3600000
local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local limit = tonumber(ARGV[2])
local mode = ARGV[3] or 'window'
if not (now and limit) or limit < 1 or not (mode == 'window' or mode == 'whole') then
  return redis.error_reply('ERR paced tenant_used_up: bad ARGV (see the header)')
end
local cutoff = math.floor((now - DAY_MS) / BUCKET_MS) - 1
local old = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', cutoff)
local gone = 0
for _, b in ipairs(old) do
  gone = gone + tonumber(redis.call('HGET', KEYS[6], 'd:' .. b) or '0')
  redis.call('HDEL', KEYS[6], 'd:' .. b)
end
if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', cutoff) end
local total = tonumber(redis.call('HGET', KEYS[6], 'total') or '0') - gone
local added = math.max(limit - total, 0)
if mode == 'whole' then added = limit end
local bucket = math.floor(now / BUCKET_MS)
if added > 0 then
  redis.call('HINCRBY', KEYS[6], 'd:' .. bucket, added)
  redis.call('HINCRBY', KEYS[6], 'H:' .. math.floor(bucket / 60), added)   -- the hour's sum
  redis.call('ZADD', KEYS[7], bucket, bucket)
end
total = total + added
redis.call('HSET', KEYS[6], 'total', total)
redis.call('PEXPIRE', KEYS[6], KEY_TTL_MS)
redis.call('PEXPIRE', KEYS[7], KEY_TTL_MS)
-- When one more fits: buckets leave the window in order, a minute after their last send.
local in_window, free_at = total, now
for _, b in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do
  in_window = in_window - tonumber(redis.call('HGET', KEYS[6], 'd:' .. b) or '0')
  if in_window + 1 <= limit then
    free_at = (tonumber(b) + 1) * BUCKET_MS + DAY_MS
    break
  end
end
local held = math.max(tonumber(redis.call('HGET', KEYS[6], 'held') or '0'), free_at)
redis.call('HSET', KEYS[6], 'held', held)
return {added, free_at}
