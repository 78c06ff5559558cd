-- KEYS[1] mailbox state (hash)   KEYS[2] mailbox day buckets (zset)
-- KEYS[4] reservations of the last 60 s (zset)
-- ARGV[1] now: `TIME` (Redis's clock) or ms (tests)   ARGV[2] pacing spacing (ms)   then pairs: ARGV[2k+1] sent at (ms), ARGV[2k+2] recipients
-- Returns 1 when it seeded, 0 when the mailbox already had state (another replica seeded it)
--
-- Rebuilds a mailbox's budgets from the send history PostgreSQL holds (sent_at, recipients of
-- the last 24 h) before its first decision, so a limiter Redis that comes back empty never hands
-- out a fresh 24 h. Atomic: two replicas seeding at once count the history once.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local spacing = tonumber(ARGV[2])
if not (now and spacing) or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR paced seed: bad ARGV (see the header)')
end
local total, last = 0, 0
for i = 3, #ARGV, 2 do
  local at, r = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if at > now - 86400000 then
    local b = math.floor(at / 60000)
    redis.call('HINCRBY', KEYS[1], 'd:' .. b, r)
    redis.call('HINCRBY', KEYS[1], 'H:' .. math.floor(b / 60), r)   -- the hour's sum
    redis.call('ZADD', KEYS[2], b, b)
    total = total + r
    -- 61 s: the direct check's window, 60 s + half the pacing allowance (PACING_ALLOWANCE, 2 s).
    if at > now - 61000 then redis.call('ZADD', KEYS[4], at, 'seed:' .. i .. ':' .. at) end
    if at > last then last = at end
  end
end
redis.call('HSET', KEYS[1], 'total', total, 'tat', last > 0 and (last + spacing) or 0, 'seeded', now,
  'hs', 1, 'bmin', '-')   -- hour sums kept, no bookings (check_and_reserve.lua)
for i = 1, 2 do redis.call('PEXPIRE', KEYS[i], 86400000 + 3600000) end
redis.call('PEXPIRE', KEYS[4], 120000)
return 1
