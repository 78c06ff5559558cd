-- KEYS[1]-KEYS[5] the mailbox's keys (not touched)   KEYS[6] tenant state (hash)
-- KEYS[7] tenant day buckets (zset)
-- ARGV[1] now: `TIME` (Redis's clock) or ms (tests)   then pairs: ARGV[2k] sent at (ms), ARGV[2k+1] external recipients
-- Returns 1 when it seeded, 0 when the tenant already had state (another replica seeded it)
--
-- Rebuilds a Graph tenant's external-recipient budget (TERRL) from the send history PostgreSQL
-- holds (sent_at and external recipients of the last 24 h, every mailbox of the tenant) before
-- its first decision, so a limiter Redis that comes back empty never hands the tenant a fresh
-- 24 h. Atomic: two replicas seeding at once count the history once.

if redis.call('HEXISTS', KEYS[6], 'total') == 1 then
  return 0
end
local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
if not now or #ARGV % 2 ~= 1 then
  return redis.error_reply('ERR paced seed_tenant: bad ARGV (see the header)')
end
local total = 0
for i = 2, #ARGV, 2 do
  local at, e = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if at > now - 86400000 and e > 0 then
    local b = math.floor(at / 60000)
    redis.call('HINCRBY', KEYS[6], 'd:' .. b, e)
    redis.call('HINCRBY', KEYS[6], 'H:' .. math.floor(b / 60), e)   -- the hour's sum
    redis.call('ZADD', KEYS[7], b, b)
    total = total + e
  end
end
redis.call('HSET', KEYS[6], 'total', total, 'seeded', now, 'hs', 1)   -- hour sums kept
for i = 6, 7 do redis.call('PEXPIRE', KEYS[i], 86400000 + 3600000) end
return 1
