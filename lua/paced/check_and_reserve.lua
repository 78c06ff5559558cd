-- KEYS[1] mailbox state (hash)            KEYS[2] mailbox day buckets (zset: bucket -> bucket)
-- KEYS[3] bookings (zset: message id -> slot ms)
-- KEYS[4] reservations of the last 60 s + allowance (zset: "<id>:<ms>" -> ms)
-- KEYS[5] requests in flight (zset: id -> lease expiry ms)
-- KEYS[6] tenant state (hash)             KEYS[7] tenant day buckets (zset)
-- ARGV[1] now: `TIME` (Redis's clock: production) or ms since the Unix epoch (a caller's
--         clock: tests only)                        ARGV[2] message id
-- ARGV[3] messages per rolling 60 s (L)            ARGV[4] recipients per rolling 24 h (D)
-- ARGV[5] recipients of this message (>= 1)        ARGV[6] of them external to the tenant
-- ARGV[7] tenant external recipients per rolling 24 h (0 = no tenant budget)
-- ARGV[8] requests in flight per mailbox           ARGV[9] lease ms (renewed while it runs)
-- ARGV[10] pacing allowance ms                     ARGV[11] booking grace ms
-- ARGV[12] priority: high | normal | bulk (optional, default normal)
-- ARGV[13] reserved percent R, 0..90 (optional, default 0 = off: priority ignored)
-- Returns {1, slot, "ok", now, total}  allowed: counted in every budget, one in-flight lease
--                                   taken; `now` is the reservation's time (release.lua needs
--                                   it), `total` the mailbox's recipients in the 24 h window
--         {0, retry_ms, reason, now, total}  not now; reason minute | day | tenant | cooldown |
--                                   in_flight. For minute/day/tenant/cooldown the message now
--                                   HOLDS a booked slot at now + retry_ms: come back then and it
--                                   is allowed; in_flight: retry_ms is the message's turn in the
--                                   mailbox's in-flight queue (field `iq`: when a lease is
--                                   expected to free), at least 1 s; nothing booked
--                                   (see in_flight_denial)
--         {-1, 0, "seed"}           no state for this mailbox (new, expired or Redis restarted
--                                   empty): seed it from the send history (seed.lua), call again
--         {-1, 0, "seed-tenant"}    a new request counting against a tenant budget that has no
--                                   state: seed it from the tenant's history (seed_tenant.lua)
--
-- One file of ~500 lines, on purpose: an EVALSHA script cannot load another, so the decision's
-- parts (housekeeping, the day walk, priority, booking) are sections of this one.
--
-- The paced algorithm. Slots are handed out in time order, spaced (60 s + allowance) / L apart
-- (GCRA's virtual scheduling: `tat` is the next free slot), so at most L fall in any 60 s even
-- when a send runs up to `allowance` late. Recipients are counted in one-minute buckets over a
-- rolling 24 h (a bucket leaves the window a minute after its last possible send, the safe
-- side). A message that does not fit is booked at the earliest slot where every budget has room,
-- counting every booking before it, and keeps it. The reservations of the last 60 s + half the
-- allowance are also checked directly (at most L; 60 s + the whole allowance for a new request
-- and a booking that comes back more than half the allowance late), so a late send can never
-- burst. A cooldown (cooldown.lua) holds the mailbox; bookings made before it move behind it.
-- A message held only by the tenant budget does not move the mailbox's next free slot: its
-- internal mail goes on.
--
-- Reserved headroom (R > 0). `normal` and `bulk` get (100 - R) % of each budget: they are paced
-- (and booked) at L' = floor(L * (100 - R) / 100) a minute (at least 1) and book only while the
-- day and tenant windows stay under (100 - R) % (a message larger than that share may use the
-- whole budget). `high` ignores their pacing (`tat`, their queue of bookings) and never moves
-- it: it takes now when the direct 60 s check, the in-flight cap and the whole day and tenant
-- budgets allow, else the earliest time they do (booked like any other). The others leave
-- S = L - L' of every 60 s free, so a `high` message normally goes at once and displaces no
-- one. Field `h` logs the last S `high` slots (sent or booked): past S in the direct check's
-- window while normal or bulk is booked ahead (`tat` > now), a `high` message waits for its
-- share (the oldest logged slot + the window) instead of taking a booked slot's room, so a
-- booking is never overtaken into a second denial; with nothing booked ahead it may use the
-- whole L. The day and tenant counts include every booking; when bookings a day ahead fill
-- them, a `high` message checks the 24 h windows it falls in instead (fits_now). The direct
-- check still holds any send that would be the L + 1st in 60 s.
--
-- Day windows: recipients per one-minute bucket (`d:<minute>`, the buckets in KEYS[2]) and per
-- hour (`H:<hour>`: the sum of its minutes), `total` their sum. The earliest time a budget has
-- room walks back from the newest bucket: whole hours (26 a read) to the hour where the
-- recipients above it pass the room, then that hour's minutes, so its cost does not grow with
-- the booked backlog (docs/decisions/0016-flat-day-window.md). `lo`: no bucket older (eviction is
-- looked for once a minute), `bmin`: no booking earlier (`-`: none; stale bookings looked for
-- only when it is older than the grace), `hs`: the hour sums are kept (else they are rebuilt once).
--
-- Cost (Redis commands inside the script, as INFO commandstats counts them): a send that fits
-- at once 9-10 (TIME included; 12-14 on a mailbox's first call, the TTLs set), a booking 9-11,
-- the booked send 8-10, plus housekeeping when a bucket leaves the 24 h (5-6, once a minute)
-- or a booking is abandoned, and 2-3 more per call with a tenant budget. Finding the slot when
-- a day budget is full: 3 (4 with more than 26 hours of buckets below the room). Priority adds
-- none (`h` is written instead of `tat`), but for 2 (fits_now) when a `high` message's day or
-- tenant count is full of bookings a day ahead. TTLs: every key lives at least 24 h after
-- its last write. A sorted set gets its TTL when a write creates it; the long-lived keys are
-- refreshed at most once per TTL_REFRESH_MS (field `ttl` of the state), with a TTL of 24 h +
-- twice that, instead of 5-7 PEXPIREs on every call.

local BUCKET_MS = 60000
local HOUR_BUCKETS = 60
local HOURS_PER_READ = 26
local DAY_MS = 86400000
local TTL_REFRESH_MS = 1800000
local KEY_TTL_MS = DAY_MS + 2 * TTL_REFRESH_MS
local IN_FLIGHT_MIN_RETRY_MS = 1000
local IN_FLIGHT_REQUEST_MS = 1000
local EXPIRE_PER_CALL = 20

-- One clock for every replica: Redis's (scripts replicate their effects, so TIME is allowed
-- before writes); a number only when a test drives virtual time.
local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
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
local priority = ARGV[12] or 'normal'
local reserved = tonumber(ARGV[13] or '0')
if not (now and per_minute and per_day and recipients and external and tenant_per_day
        and max_in_flight and lease_ms and allowance and grace and reserved)
    or id == nil or id == '' or recipients < 1 or per_minute < 1 or per_day < 1
    or max_in_flight < 1 or external < 0 or external > recipients
    or not (priority == 'high' or priority == 'normal' or priority == 'bulk')
    or reserved < 0 or reserved > 90 or reserved % 1 ~= 0 then
  return redis.error_reply('ERR paced check_and_reserve: bad ARGV (see the header)')
end

-- One read of everything the decision needs from the state hash, the bucket and hour of now too.
local now_bucket = math.floor(now / BUCKET_MS)
local now_hour = math.floor(now_bucket / HOUR_BUCKETS)
local state = redis.call('HMGET', KEYS[1], 'tat', 'seeded', 'cool', 'total', 'ttl', 'b:' .. id, 'h',
  'hs', 'lo', 'bmin', 'd:' .. now_bucket, 'H:' .. now_hour, 'held')
if not state[1] and not state[2] then
  return {-1, 0, 'seed'}
end
local tat = tonumber(state[1] or '0')
local cool = tonumber(state[3] or '0')
-- A limit pause (mailbox_used_up.lua: an NDR said the day is used up): held like a cooldown,
-- denied as `day`; Inbox reads (read_lease.lua) are not held by it.
local held = tonumber(state[13] or '0')
local total = tonumber(state[4] or '0')
local ttl_at = tonumber(state[5] or '0')
local raw = state[6]
-- The fields of now's bucket and hour as read, kept current by every change below (`cached`),
-- and what the decision's one HSET writes besides (`writes`).
local cached = {['d:' .. now_bucket] = tonumber(state[11] or '0'), ['H:' .. now_hour] = tonumber(state[12] or '0')}
local writes = {}
local refresh = now - ttl_at >= TTL_REFRESH_MS
if refresh then writes.ttl = now end
if not state[8] and total == 0 then writes.hs = 1 end
local bookings_known = state[10] or (not state[5] and '-')   -- nil: state from before `bmin`

-- Reserved headroom: `high` may use every budget whole, the others (100 - R) % of it.
local high = priority == 'high' and reserved > 0
local function low_share(limit, need)
  if reserved == 0 then return limit end
  return math.max(math.floor(limit * (100 - reserved) / 100), need)
end
local function share(limit, need)
  if high then return limit end
  return low_share(limit, need)
end
local spacing = math.ceil((60000 + allowance) / low_share(per_minute, 1))
local high_share = math.max(per_minute - low_share(per_minute, 1), 1)
-- The direct check counts reservations over 60 s + half the allowance, not 60 s: the time
-- from a reservation to the provider's arrival (a token fetch, a new connection) varies, and
-- the provider counts any 60 s of its arrivals. Half, so that paced slots that run late by
-- less than half the allowance more than the one L slots before them are never held.
local window = 60000 + math.floor(allowance / 2)
-- A booking that comes back later than half the allowance has lost the pacing's margin (a
-- catch-up after the replicas stood still sends them back to back), and a new request is
-- not paced when it is `high`: their direct check counts 60 s + the whole allowance, so any
-- L + 1 of them span the allowance too. `window` is left to bookings on time.
local late_window = 60000 + allowance
local tenant_on = tenant_per_day > 0 and external > 0

local function hincrby(hash, field, amount)
  local v = redis.call('HINCRBY', hash, field, amount)
  if hash == KEYS[1] and cached[field] then cached[field] = v end
  return v
end

-- A command over many fields, 1,000 at a time (Lua's unpack takes a few thousand values at
-- most); the replies joined.
local function each_1000(command, hash, args)
  local all = {}
  for i = 1, #args, 1000 do
    local part = redis.call(command, hash, unpack(args, i, math.min(i + 999, #args)))
    if type(part) == 'table' then for _, v in ipairs(part) do all[#all + 1] = v end end
  end
  return all
end

-- A legacy state (before `hs`) gets its hour sums from its minute buckets, once.
local function keep_hours(hash, buckets)
  local bs = redis.call('ZRANGE', buckets, 0, -1)
  local fields = {}
  for i, b in ipairs(bs) do fields[i] = 'd:' .. b end
  local got, sums, flat = each_1000('HMGET', hash, fields), {}, {'hs', 1}
  for i, b in ipairs(bs) do
    local h = math.floor(tonumber(b) / HOUR_BUCKETS)
    sums[h] = (sums[h] or 0) + tonumber(got[i] or '0')
  end
  for h, v in pairs(sums) do
    flat[#flat + 1] = 'H:' .. h; flat[#flat + 1] = v
    if hash == KEYS[1] and h == now_hour then cached['H:' .. h] = v end
  end
  each_1000('HSET', hash, flat)
end

-- Day budgets: buckets that left the window go, from their hours and `total` too. `lo` (nil:
-- unknown) is the oldest bucket there can be: nothing to look for before the cutoff reaches it.
-- Returns the hash's total after the eviction, or nil when nothing left the window.
local function evict(hash, buckets, lo, in_window)
  local cutoff = math.floor((now - DAY_MS) / BUCKET_MS) - 1
  if (lo and cutoff < lo) or (not lo and in_window == 0) then
    if not lo and hash == KEYS[1] then writes.lo = cutoff + 1 end
    return nil
  end
  if hash == KEYS[1] then writes.lo = cutoff + 1 end
  local old = redis.call('ZRANGEBYSCORE', buckets, '-inf', cutoff)
  if #old == 0 then return nil end
  local fields, hours = {}, {}
  for i, b in ipairs(old) do fields[i] = 'd:' .. b end
  local got = each_1000('HMGET', hash, fields)
  local gone = 0
  for i, b in ipairs(old) do
    local v, h = tonumber(got[i] or '0'), math.floor(tonumber(b) / HOUR_BUCKETS)
    gone = gone + v
    hours[h] = (hours[h] or 0) + v
  end
  for h, v in pairs(hours) do   -- an hour's field goes with its last recipients
    if (v == 0 and (h + 1) * HOUR_BUCKETS - 1 <= cutoff) or (v > 0 and redis.call('HINCRBY', hash, 'H:' .. h, -v) <= 0) then
      fields[#fields + 1] = 'H:' .. h
    end
  end
  each_1000('HDEL', hash, fields)
  redis.call('ZREMRANGEBYSCORE', buckets, '-inf', cutoff)
  return redis.call('HINCRBY', hash, 'total', -gone)
end

-- A write that creates a key gives it its TTL (a bucket ZADDed the first time: at most once a
-- minute; a tenant hash whose total starts from 0), unless this call refreshes every TTL after.
-- `total` of the mailbox's own hash is written by the decision's HSET.
local function add(hash, buckets, at, amount)
  if amount == 0 then return end
  local b = math.floor(at / BUCKET_MS)
  local in_bucket = hincrby(hash, 'd:' .. b, amount)
  hincrby(hash, 'H:' .. math.floor(b / HOUR_BUCKETS), amount)
  if hash == KEYS[1] then
    total = total + amount
  elseif redis.call('HINCRBY', hash, 'total', amount) == amount and not refresh then
    redis.call('PEXPIRE', hash, KEY_TTL_MS)
  end
  if in_bucket == amount and redis.call('ZADD', buckets, b, b) == 1 and not refresh then
    redis.call('PEXPIRE', buckets, KEY_TTL_MS)
  end
end

-- Gives back `amount` from the bucket of `at` (and its hour), never below zero.
local function take_back(hash, at, amount)
  if amount == 0 then return end
  local b = math.floor(at / BUCKET_MS)
  local field = 'd:' .. b
  local have = tonumber(redis.call('HGET', hash, field) or '0')
  local back = math.min(have, amount)
  if back > 0 then
    hincrby(hash, field, -back)
    hincrby(hash, 'H:' .. math.floor(b / HOUR_BUCKETS), -back)
    redis.call('HINCRBY', hash, 'total', -back)
    if hash == KEYS[1] then total = total - back end
  end
end

-- The earliest time at which `need` more fits under `limit`, counting every bucket (bookings
-- too): the end of the 24 h after the newest bucket at which the recipients after it pass the
-- room. Walked back from the newest bucket, by hours, then the minutes of the one hour.
local function day_free_at_by_minutes(hash, buckets, in_window, need, limit)
  for _, b in ipairs(redis.call('ZRANGE', buckets, 0, -1)) do
    in_window = in_window - tonumber(redis.call('HGET', hash, 'd:' .. b) or '0')
    if in_window + need <= limit then return (tonumber(b) + 1) * BUCKET_MS + DAY_MS end
  end
  return now
end
local function day_free_at(hash, buckets, in_window, need, limit)
  if in_window + need <= limit or need > limit then return now end
  local room = limit - need
  local top = tonumber(redis.call('ZRANGE', buckets, -1, -1)[1] or '')
  if not top then return now end
  local lowest = math.floor(math.floor((now - DAY_MS) / BUCKET_MS) / HOUR_BUCKETS)
  local above, hour, cross = 0, math.floor(top / HOUR_BUCKETS), nil
  while not cross and hour >= lowest do
    local n, fields = math.min(HOURS_PER_READ, hour - lowest + 1), {}
    for i = 1, n do fields[i] = 'H:' .. (hour - i + 1) end
    local got = redis.call('HMGET', hash, unpack(fields))
    for i = 1, n do
      local v = tonumber(got[i] or '0')
      if above + v > room then cross = hour - i + 1; break end
      above = above + v
    end
    hour = hour - n
  end
  if cross then
    local last, fields = math.min(cross * HOUR_BUCKETS + HOUR_BUCKETS - 1, top), {}
    for m = last, cross * HOUR_BUCKETS, -1 do fields[#fields + 1] = 'd:' .. m end
    local got = redis.call('HMGET', hash, unpack(fields))
    for i = 1, #fields do
      above = above + tonumber(got[i] or '0')
      if above > room then return (last - i + 2) * BUCKET_MS + DAY_MS end
    end
  end
  -- The hours disagree with their minutes (never expected): the minutes decide.
  return day_free_at_by_minutes(hash, buckets, in_window, need, limit)
end

-- `high` only, when the count with every booking (above) has no room: whether `need` sent now
-- fits each 24 h window it falls in (those ending in the next 24 h), so bookings a day ahead
-- do not take the reserved share. Two commands (more past 1,000 buckets), a sweep over the
-- buckets of those 48 h only, whatever the bookings beyond.
local function fits_now(hash, buckets, need, limit)
  local x, span = now_bucket, DAY_MS / BUCKET_MS
  local bs = redis.call('ZRANGEBYSCORE', buckets, x - span, x + span)
  if #bs == 0 then return need <= limit end
  local fields = {}
  for i, b in ipairs(bs) do fields[i] = 'd:' .. b end
  local got = each_1000('HMGET', hash, fields)
  local lo, hi, sum = 1, 0, 0
  local function fits_window(y)           -- the window ending in bucket y: buckets [y - span, y]
    while hi < #bs and tonumber(bs[hi + 1]) <= y do hi = hi + 1; sum = sum + tonumber(got[hi] or '0') end
    while lo <= hi and tonumber(bs[lo]) < y - span do sum = sum - tonumber(got[lo] or '0'); lo = lo + 1 end
    return sum + need <= limit
  end
  if not fits_window(x) then return false end
  for _, b in ipairs(bs) do
    b = tonumber(b)
    if b > x and not fits_window(b) then return false end
  end
  return true
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

-- The decision's one write of the state hash: `extra` (field, value pairs) and `writes`.
local function write_state(extra)
  for f, v in pairs(writes) do extra[#extra + 1] = f; extra[#extra + 1] = v end
  writes = {}
  if #extra > 0 then redis.call('HSET', KEYS[1], unpack(extra)) end
end

-- The long-lived keys' TTLs, at most once per TTL_REFRESH_MS (and the tenant's when it has a
-- budget; the bookings' when there may be any): each then outlives its last write by at least
-- KEY_TTL_MS - TTL_REFRESH_MS > 24 h. `ttl` is written with the decision (`writes`).
local function refresh_ttls()
  if not refresh then return end
  for i = 1, 5 do
    if i ~= 3 or bookings_known ~= '-' then redis.call('PEXPIRE', KEYS[i], KEY_TTL_MS) end
  end
  if tenant_per_day > 0 then
    redis.call('PEXPIRE', KEYS[6], KEY_TTL_MS)
    redis.call('PEXPIRE', KEYS[7], KEY_TTL_MS)
  end
end

-- The reservations of the direct check's window `w` (default `window`; the set keeps
-- `late_window`), and the requests in flight (pruned).
local function sent_in_window(w)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - late_window)
  return redis.call('ZCOUNT', KEYS[4], '(' .. (now - (w or window)), '+inf')
end

local function in_flight()
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  return redis.call('ZCARD', KEYS[5])
end

-- A full in-flight set: the message waits for its turn in the mailbox's in-flight queue, not a
-- retry every second (issue 46: up to 17 denials per message while the cap bound). The queue
-- is `max_in_flight` lanes (field `iq`: when each lane's request is expected to end, ms): a
-- denied message takes the lane that frees first, comes back then, and moves that lane on by
-- `rd`, the mailbox's mean request duration (release.lua measures it; 1 s until one is
-- measured). So 50 waiting messages come back about when a lease frees for each, one lane's
-- worth at a time, instead of all of them every second. A lane never frees before the lease
-- it stands for can end: the leases' own ends (the take or last renewal, expiry - lease, plus
-- `rd`; a lease held past twice `rd`, at least 1 s, is stuck or slow: no sooner than its
-- expiry) are a floor under the lanes, sorted against each other, so a stale queue costs
-- nothing and a stuck mailbox waits for its leases as before. A message that comes back to a
-- still-full cap takes the next lane's turn again; each comes back a tenth of a request
-- after its turn, not to race the release it waits for. Three commands, on this path only.
local function in_flight_denial()
  local q = redis.call('HMGET', KEYS[1], 'rd', 'iq')
  local rd = tonumber(q[1] or '') or IN_FLIGHT_REQUEST_MS
  local ends = {}
  local leases = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
  for i = 2, #leases, 2 do
    local expiry = tonumber(leases[i])
    local touched = expiry - lease_ms
    if now - touched >= math.max(2 * rd, IN_FLIGHT_REQUEST_MS) then
      ends[#ends + 1] = expiry
    else
      ends[#ends + 1] = math.max(touched + rd, now)
    end
  end
  table.sort(ends)
  local lanes = {}
  for part in string.gmatch(q[2] or '', '[^,]+') do lanes[#lanes + 1] = tonumber(part) end
  table.sort(lanes)
  for i = 1, max_in_flight do
    lanes[i] = math.max(lanes[i] or now, ends[i] or now)
  end
  for i = #lanes, max_in_flight + 1, -1 do lanes[i] = nil end   -- the cap was lowered
  table.sort(lanes)
  -- Back a tenth of a request after the lane's expected end, so as not to race its release;
  -- its own request ends a mean duration after it is back.
  local back = math.max(lanes[1] + math.floor(rd / 10), now + IN_FLIGHT_MIN_RETRY_MS)
  lanes[1] = back + rd
  redis.call('HSET', KEYS[1], 'iq', table.concat(lanes, ','))
  return {0, back - now, 'in_flight', now, total}
end

-- When the oldest reservation of the window `w` leaves it (only called when it is full).
local function window_free_at(w)
  w = w or window
  local oldest = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. (now - w), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return tonumber(oldest[2]) + w
end

-- `sent` and `flying`: the sets' sizes before; an empty set is created by this write.
local function take_lease_and_count(slot, sent, flying)
  redis.call('ZADD', KEYS[4], now, id .. ':' .. now)   -- a resend counts again
  if sent == 0 and not refresh then redis.call('PEXPIRE', KEYS[4], KEY_TTL_MS) end
  redis.call('ZADD', KEYS[5], now + lease_ms, id)
  if flying == 0 and not refresh then redis.call('PEXPIRE', KEYS[5], KEY_TTL_MS) end
  write_state({})
  refresh_ttls()
  return {1, slot, 'ok', now, total}
end

-- A message that holds a booking: its budgets were counted when it was booked.
if raw then
  local fields = split(raw)
  local slot = tonumber(fields[1])
  local hold = math.max(cool, held)
  if tonumber(fields[3]) > 0 then   -- external recipients: the tenant's pause holds it too
    hold = math.max(hold, tonumber(redis.call('HGET', KEYS[6], 'held') or '0'))
  end
  if hold > now and slot < hold then
    forget_booking(id, fields)            -- booked before a cooldown or pause: re-booked behind it below
  elseif slot > now then
    return {0, slot - now, fields[4], now, total}   -- early: its slot still waits for it
  else
    local w = now - slot > math.floor(allowance / 2) and late_window or window
    local sent = sent_in_window(w)
    if sent >= per_minute then
      return {0, window_free_at(w) - now, 'minute', now, total}   -- late: hold, keep the booking
    end
    local flying = in_flight()
    if flying >= max_in_flight then
      return in_flight_denial()
    end
    redis.call('HDEL', KEYS[1], 'b:' .. id)
    redis.call('ZREM', KEYS[3], id)
    return take_lease_and_count(slot, sent, flying)
  end
end

-- A new request. The tenant's budget must be known first (`total` is set by every write and
-- by the seed: missing means the tenant has no state).
local tenant_total = 0
if tenant_on then
  local t = redis.call('HMGET', KEYS[6], 'total', 'hs')
  if not t[1] then return {-1, 0, 'seed-tenant'} end
  tenant_total = tonumber(t[1])
  if not t[2] and tenant_total > 0 then keep_hours(KEYS[6], KEYS[7]) end
end
if not state[8] and total > 0 then keep_hours(KEYS[1], KEYS[2]) end

-- Housekeeping before a new slot is chosen: old buckets, bookings never used.
total = evict(KEYS[1], KEYS[2], tonumber(state[9] or ''), total) or total
if tenant_on then tenant_total = evict(KEYS[6], KEYS[7], nil, nil) or tenant_total end
local bmin = tonumber(bookings_known or '')
if (bmin and bmin <= now - grace) or not bookings_known then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - grace, 'LIMIT', 0, EXPIRE_PER_CALL)
  for _, booking_id in ipairs(stale) do
    local booked = redis.call('HGET', KEYS[1], 'b:' .. booking_id)
    if booked then forget_booking(booking_id, split(booked)) else redis.call('ZREM', KEYS[3], booking_id) end
  end
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
  bookings_known = first or '-'
  writes.bmin = bookings_known
  bmin = tonumber(first or '')
end

-- A new request: the earliest slot where every budget has room.
local slot = math.max(now, tat)
local highs = {}   -- `high` only: its logged slots still in the window, oldest first
if high then
  for t in string.gmatch(state[7] or '', '[^,]+') do
    if tonumber(t) > now - window then highs[#highs + 1] = tonumber(t) end
  end
  table.sort(highs)
  slot = now                            -- ahead of every booking, unless past its share
  if #highs >= high_share and tat > now then
    slot = math.max(now, highs[#highs - high_share + 1] + window)
  end
end
-- The log with `at` added, its last `high_share` slots (written with the decision).
local function high_log(at)
  highs[#highs + 1] = at
  table.sort(highs)
  return table.concat(highs, ',', math.max(#highs - high_share + 1, 1))
end
local reason = 'minute'
if cool > slot then slot = cool; reason = 'cooldown' end
if held > slot then slot = held; reason = 'day' end
local day_at = day_free_at(KEYS[1], KEYS[2], total, recipients, share(per_day, recipients))
if high and day_at > now and fits_now(KEYS[1], KEYS[2], recipients, per_day) then day_at = now end
if day_at > slot then slot = day_at; reason = 'day' end
if tenant_on then
  local tenant_at = day_free_at(KEYS[6], KEYS[7], tenant_total, external,
    share(tenant_per_day, external))
  if high and tenant_at > now and fits_now(KEYS[6], KEYS[7], external, tenant_per_day) then
    tenant_at = now
  end
  if tenant_at > slot then slot = tenant_at; reason = 'tenant' end
end
if slot <= now then
  -- The whole allowance: a normal send here comes a spacing after the last (`tat`), so L of
  -- them span 62 s anyway; a `high` one is not paced and may follow another at once.
  local sent = sent_in_window(late_window)
  if sent >= per_minute then
    slot = window_free_at(late_window)
    reason = 'minute'
  else
    local flying = in_flight()
    if flying >= max_in_flight then
      return in_flight_denial()   -- nothing taken, nothing booked
    end
    -- Counted in now's bucket and hour by the one HSET (their values were read with the state).
    local d, h = 'd:' .. now_bucket, 'H:' .. now_hour
    total = total + recipients
    writes[high and 'h' or 'tat'] = high and high_log(now) or now + spacing
    writes[d], writes[h], writes.total = cached[d] + recipients, cached[h] + recipients, total
    if cached[d] == 0 and redis.call('ZADD', KEYS[2], now_bucket, now_bucket) == 1 and not refresh then
      redis.call('PEXPIRE', KEYS[2], KEY_TTL_MS)
    end
    if tenant_on then add(KEYS[6], KEYS[7], now, external) end
    return take_lease_and_count(now, sent, flying)
  end
end

-- Book it. Held by the tenant budget alone, it leaves the mailbox's pacing where it is, so
-- mail to the tenant's own domains is not held behind it; a `high` booking never moves it.
if reason ~= 'tenant' and not high then tat = slot + spacing end
add(KEYS[1], KEYS[2], slot, recipients)
if tenant_on then add(KEYS[6], KEYS[7], slot, external) end
if not bmin or slot < bmin then writes.bmin = slot end
write_state({high and 'h' or 'tat', high and high_log(slot) or tat, 'b:' .. id,
  slot .. ',' .. recipients .. ',' .. (tenant_on and external or 0) .. ',' .. reason, 'total', total,
  'sp', spacing})
redis.call('ZADD', KEYS[3], slot, id)
redis.call('PEXPIRE', KEYS[3], KEY_TTL_MS)
refresh_ttls()
return {0, slot - now, reason, now, total}
