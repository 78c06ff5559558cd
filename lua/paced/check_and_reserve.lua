-- KEYS[1] mailbox state (hash)            KEYS[2] mailbox day buckets (zset: bucket -> bucket)
-- KEYS[3] bookings (zset: message id -> slot ms)
-- KEYS[4] reservations of the last 60 s (zset: "<id>:<ms>" -> ms)
-- KEYS[5] requests in flight (zset: id -> lease expiry ms)
-- KEYS[6] tenant state (hash)             KEYS[7] tenant day buckets (zset)
-- ARGV[1] now, ms since the Unix epoch (UTC)      ARGV[2] message id
-- ARGV[3] messages per rolling 60 s (L)            ARGV[4] recipients per rolling 24 h (D)
-- ARGV[5] recipients of this message (>= 1)        ARGV[6] of them external to the tenant
-- ARGV[7] tenant external recipients per rolling 24 h (0 = no tenant budget)
-- ARGV[8] requests in flight per mailbox           ARGV[9] lease ms (above the HTTP timeout)
-- ARGV[10] pacing allowance ms                     ARGV[11] booking grace ms
-- Returns {1, slot, "ok"}           allowed: counted in every budget, one in-flight lease taken
--         {0, retry_ms, reason}     not now; reason minute | day | tenant | cooldown | in_flight.
--                                   For minute/day/tenant/cooldown the message now HOLDS a booked
--                                   slot at now + retry_ms: come back then and it is allowed.
--         {-1, 0, "seed"}           no state for this mailbox (new, expired or Redis restarted
--                                   empty): seed it from the send history (seed.lua), call again
--
-- The paced algorithm. Slots are handed out in time order, spaced (60 s + allowance) / L apart
-- (GCRA's virtual scheduling: `tat` is the next free slot), so at most L fall in any 60 s even
-- when a send runs up to `allowance` late. Recipients are counted in one-minute buckets over a
-- rolling 24 h (a bucket leaves the window a minute after its last possible send, the safe
-- side). A message that does not fit is booked at the earliest slot where every budget has room,
-- counting every booking before it, and keeps it. The reservations of the last 60 s + half the
-- allowance are also checked directly (at most L), so a late send can never burst. A cooldown (cooldown.lua) holds
-- the mailbox; bookings made before it move behind it.

local BUCKET_MS = 60000
local DAY_MS = 86400000
local KEY_TTL_MS = DAY_MS + 3600000
local IN_FLIGHT_RETRY_MS = 250
local EXPIRE_PER_CALL = 20

local now = tonumber(ARGV[1])
local id = ARGV[2]
local per_minute = tonumber(ARGV[3])
local per_day = tonumber(ARGV[4])
local recipients = tonumber(ARGV[5])
local external = tonumber(ARGV[6])
local tenant_per_day = tonumber(ARGV[7])
local max_in_flight = tonumber(ARGV[8])
local lease_ms = tonumber(ARGV[9])
local allowance = tonumber(ARGV[10])
local grace = tonumber(ARGV[11])
if not (now and per_minute and per_day and recipients and external and tenant_per_day
        and max_in_flight and lease_ms and allowance and grace)
    or id == nil or id == '' or recipients < 1 or per_minute < 1 or per_day < 1
    or max_in_flight < 1 or external < 0 or external > recipients then
  return redis.error_reply('ERR paced check_and_reserve: bad ARGV (see the header)')
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0, 'seed'}
end

local spacing = math.ceil((60000 + allowance) / per_minute)
-- The direct check counts reservations over 60 s + half the allowance, not 60 s: the time
-- from a reservation to the provider's arrival (a token fetch, a new connection) varies, and
-- the provider counts any 60 s of its arrivals. Half, so that paced slots that run late by
-- less than half the allowance more than the one L slots before them are never held.
local window = 60000 + math.floor(allowance / 2)
local tenant_on = tenant_per_day > 0 and external > 0

-- Day budgets: `total` is the sum of the buckets still in the window; `d:<bucket>` each bucket.
local function evict(state, buckets)
  local cutoff = math.floor((now - DAY_MS) / BUCKET_MS) - 1
  local old = redis.call('ZRANGEBYSCORE', buckets, '-inf', cutoff)
  if #old == 0 then return end
  local gone = 0
  for _, b in ipairs(old) do
    gone = gone + tonumber(redis.call('HGET', state, 'd:' .. b) or '0')
    redis.call('HDEL', state, 'd:' .. b)
  end
  redis.call('ZREMRANGEBYSCORE', buckets, '-inf', cutoff)
  redis.call('HINCRBY', state, 'total', -gone)
end

local function add(state, buckets, at, amount)
  if amount == 0 then return end
  local b = math.floor(at / BUCKET_MS)
  redis.call('HINCRBY', state, 'd:' .. b, amount)
  redis.call('HINCRBY', state, 'total', amount)
  redis.call('ZADD', buckets, b, b)
end

-- Gives back `amount` from the bucket of `at`, never below zero.
local function take_back(state, at, amount)
  if amount == 0 then return end
  local field = 'd:' .. math.floor(at / BUCKET_MS)
  local have = tonumber(redis.call('HGET', state, field) or '0')
  local back = math.min(have, amount)
  if back > 0 then
    redis.call('HINCRBY', state, field, -back)
    redis.call('HINCRBY', state, 'total', -back)
  end
end

-- The earliest time at which `need` more fits under `limit` (buckets leave the window in order).
local function day_free_at(state, buckets, need, limit)
  local total = tonumber(redis.call('HGET', state, 'total') or '0')
  if total + need <= limit then return now end
  local all = redis.call('ZRANGE', buckets, 0, -1)
  for _, b in ipairs(all) do
    total = total - tonumber(redis.call('HGET', state, 'd:' .. b) or '0')
    if total + need <= limit then
      return (tonumber(b) + 1) * BUCKET_MS + DAY_MS
    end
  end
  return now
end

local function forget_booking(booking_id, fields)
  local slot, r, e = tonumber(fields[1]), tonumber(fields[2]), tonumber(fields[3])
  take_back(KEYS[1], slot, r)
  if e > 0 then take_back(KEYS[6], slot, e) end
  redis.call('HDEL', KEYS[1], 'b:' .. booking_id)
  redis.call('ZREM', KEYS[3], booking_id)
end

local function split(text)
  local fields = {}
  for part in string.gmatch(text, '[^,]+') do fields[#fields + 1] = part end
  return fields
end

-- Housekeeping: old buckets, old reservations, expired leases, bookings never used.
evict(KEYS[1], KEYS[2])
if tenant_on then evict(KEYS[6], KEYS[7]) end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - grace, 'LIMIT', 0, EXPIRE_PER_CALL)
for _, booking_id in ipairs(stale) do
  local raw = redis.call('HGET', KEYS[1], 'b:' .. booking_id)
  if raw then forget_booking(booking_id, split(raw)) else redis.call('ZREM', KEYS[3], booking_id) end
end

local function touch()
  for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], KEY_TTL_MS) end
  if tenant_on then
    redis.call('PEXPIRE', KEYS[6], KEY_TTL_MS)
    redis.call('PEXPIRE', KEYS[7], KEY_TTL_MS)
  end
end

-- When the oldest of the last 60 s of reservations leaves the window (only called when full).
local function window_free_at()
  local oldest = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  return tonumber(oldest[2]) + window
end

local function take_lease_and_count(slot)
  redis.call('ZADD', KEYS[4], now, id .. ':' .. now)   -- a resend counts again
  redis.call('ZADD', KEYS[5], now + lease_ms, id)
  touch()
  return {1, slot, 'ok'}
end

local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '0')
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or '0')

-- A message that holds a booking.
local raw = redis.call('HGET', KEYS[1], 'b:' .. id)
if raw then
  local fields = split(raw)
  local slot = tonumber(fields[1])
  if cool > now and slot < cool then
    forget_booking(id, fields)            -- booked before a cooldown: re-booked behind it below
  elseif slot > now then
    return {0, slot - now, fields[4]}     -- early: its slot still waits for it
  elseif redis.call('ZCARD', KEYS[4]) >= per_minute then
    return {0, window_free_at() - now, 'minute'}      -- a late send: hold, keep the booking
  elseif redis.call('ZCARD', KEYS[5]) >= max_in_flight then
    return {0, IN_FLIGHT_RETRY_MS, 'in_flight'}
  else
    redis.call('HDEL', KEYS[1], 'b:' .. id)
    redis.call('ZREM', KEYS[3], id)
    return take_lease_and_count(slot)
  end
end

-- A new request: the earliest slot where every budget has room.
local slot = math.max(now, tat)
local reason = 'minute'
if cool > slot then slot = cool; reason = 'cooldown' end
local day_at = day_free_at(KEYS[1], KEYS[2], recipients, per_day)
if day_at > slot then slot = day_at; reason = 'day' end
if tenant_on then
  local tenant_at = day_free_at(KEYS[6], KEYS[7], external, tenant_per_day)
  if tenant_at > slot then slot = tenant_at; reason = 'tenant' end
end
if slot <= now then
  if redis.call('ZCARD', KEYS[4]) >= per_minute then
    slot = window_free_at()
    reason = 'minute'
  elseif redis.call('ZCARD', KEYS[5]) >= max_in_flight then
    return {0, IN_FLIGHT_RETRY_MS, 'in_flight'}   -- nothing taken, nothing booked
  else
    redis.call('HSET', KEYS[1], 'tat', now + spacing)
    add(KEYS[1], KEYS[2], now, recipients)
    if tenant_on then add(KEYS[6], KEYS[7], now, external) end
    return take_lease_and_count(now)
  end
end

-- Book it.
redis.call('HSET', KEYS[1], 'tat', slot + spacing, 'b:' .. id,
  slot .. ',' .. recipients .. ',' .. (tenant_on and external or 0) .. ',' .. reason)
redis.call('ZADD', KEYS[3], slot, id)
add(KEYS[1], KEYS[2], slot, recipients)
if tenant_on then add(KEYS[6], KEYS[7], slot, external) end
touch()
return {0, slot - now, reason}
