-- KEYS[1] mailbox state (hash)            KEYS[2] mailbox day buckets (zset)
-- KEYS[3]-KEYS[7] the mailbox's and its tenant's other keys (not touched; one slot)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)
-- ARGV[2] the mailbox's recipients per rolling 24 h (D)
-- ARGV[3] `window` (fill the window up to D: it frees as our counted recipients leave it) or
--         `whole` (add D now: nothing fits until now + 24 h)
-- Returns {added, free_at}: the recipients added to now's bucket, and when the mailbox may send
-- again (ms; also its hold, field `held`); {-1, 0} when the mailbox has no state (not seeded: the seed
-- re-applies the pause from PostgreSQL's `limit_pauses`)
--
-- Exchange bounced a message of this mailbox with `5.1.90` / `5.2.2 SubmissionQuotaExceeded`
-- (the mailbox's recipients per rolling 24 h are used up: its count is higher than ours, a person
-- or another app sent from it) or a tenant block with no tenant budget configured (`whole`).
-- The day budget learns from it, as tenant_used_up.lua does for the tenant: the recipients
-- sent in the last 24 h (buckets up to now's; later ones are bookings) are topped up to D in
-- now's bucket. Bookings would still be honoured without a second check, so the mailbox is also
-- held until the window frees (field `held`, a cooldown that Inbox reads ignore): a booking
-- before that is dropped and booked again behind it, and every new message is booked (reason
-- `day`, check_and_reserve.lua).

local BUCKET_MS = 60000
local HOUR_BUCKETS = 60
local DAY_MS = 86400000
local KEY_TTL_MS = DAY_MS + 3600000
local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local limit = tonumber(ARGV[2])
local mode = ARGV[3]
if not (now and limit) or limit < 1 or not (mode == 'window' or mode == 'whole') then
  return redis.error_reply('ERR paced mailbox_used_up: bad ARGV (see the header)')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0}
end
local now_bucket = math.floor(now / BUCKET_MS)
local cutoff = math.floor((now - DAY_MS) / BUCKET_MS) - 1
local buckets = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. cutoff, now_bucket)
local counts, sent = {}, 0
for i, b in ipairs(buckets) do
  counts[i] = tonumber(redis.call('HGET', KEYS[1], 'd:' .. b) or '0')
  sent = sent + counts[i]
end
local added = limit
if mode == 'window' then added = math.max(limit - sent, 0) end
if added > 0 then
  redis.call('HINCRBY', KEYS[1], 'd:' .. now_bucket, added)
  redis.call('HINCRBY', KEYS[1], 'H:' .. math.floor(now_bucket / HOUR_BUCKETS), added)
  redis.call('HINCRBY', KEYS[1], 'total', added)
  redis.call('ZADD', KEYS[2], now_bucket, now_bucket)
end
-- When one more fits: the sent buckets leave the window in order, a minute after their last
-- send; the filler (now's bucket) last.
local free_at = (now_bucket + 1) * BUCKET_MS + DAY_MS
if mode == 'window' then
  local in_window = sent + added
  for i, b in ipairs(buckets) do
    if tonumber(b) >= now_bucket then break end
    in_window = in_window - counts[i]
    if in_window + 1 <= limit then
      free_at = (tonumber(b) + 1) * BUCKET_MS + DAY_MS
      break
    end
  end
end
local held = math.max(tonumber(redis.call('HGET', KEYS[1], 'held') or '0'), free_at)
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], 'tat') or '0'), held)
redis.call('HSET', KEYS[1], 'held', held, 'tat', tat)
redis.call('PEXPIRE', KEYS[1], KEY_TTL_MS)
redis.call('PEXPIRE', KEYS[2], KEY_TTL_MS)
return {added, free_at}
