-- KEYS[1] the tenant's trace requests (zset: request id -> ms)   KEYS[2] its cooldown (ms, string)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)
-- ARGV[2] 'take' or 'cool'
-- take: ARGV[3] requests per window   ARGV[4] window ms   ARGV[5] request id
--   Returns {1, now} counted, or {0, wait_ms} when the cooldown holds or the window is full.
-- cool: ARGV[3] until (ms): no request before then (a 429's Retry-After); never shortened.
--   Returns {1, now}.
--
-- Exchange's message trace takes 100 requests per tenant per 5-minute running window, shared by
-- every caller (https://learn.microsoft.com/powershell/module/exchange/get-messagetracedetailv2);
-- every replica's requests count here, under a margin the caller leaves.

local now = tonumber(ARGV[1])
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
if not now then return redis.error_reply('ERR trace budget: bad ARGV[1]') end
local cool = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[2] == 'cool' then
  local until_ms = tonumber(ARGV[3])
  if not until_ms then return redis.error_reply('ERR trace budget: bad ARGV[3]') end
  if until_ms > cool and until_ms > now then
    redis.call('SET', KEYS[2], until_ms, 'PX', until_ms - now)
  end
  return {1, now}
end
local limit = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local id = ARGV[5]
if not (limit and window) or id == nil or id == '' then
  return redis.error_reply('ERR trace budget: bad ARGV (see the header)')
end
if cool > now then return {0, cool - now} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, math.max(1, tonumber(oldest[2]) + window - now)}
end
redis.call('ZADD', KEYS[1], now, id)
redis.call('PEXPIRE', KEYS[1], window)
return {1, now}
