-- KEYS[1] mailbox state (hash)   KEYS[2] mailbox day buckets (zset)   KEYS[3] bookings (zset)
-- KEYS[4] reservations of the last 60 s (zset)
-- ARGV[1] now: `TIME` (Redis's clock) or ms (tests)   ARGV[2] pacing spacing (ms) of normal/bulk
-- ARGV[3] how many `high` slots field `h` keeps (L - L', at least 1)
-- ARGV[4] n: how many sent messages follow, then n pairs: sent at (ms), recipients
-- then the booked rows, 6 values each: message id, slot (ms), recipients, of them external to
--   the tenant (0: no tenant budget), reason (minute | day | tenant), class (h: `high` with a
--   reserved share, p: paced, normal or bulk)
-- Returns 1 when it seeded, 0 when the mailbox already had state (another replica seeded it)
--
-- Rebuilds a mailbox's budgets from what PostgreSQL holds before its first decision, so a
-- limiter Redis that comes back empty never hands out a fresh 24 h: the send history (sent_at,
-- recipients of the last 24 h) and the booked backlog (SCHEDULED rows a booking deferred, their
-- `scheduled_on` slots). Each booked row gets its booking back as check_and_reserve.lua wrote
-- it (`b:<id>`, the bookings set, its recipients in the bucket of its slot), and the next free
-- slot `tat` goes behind the last normal/bulk booking (a `tenant` one does not move it, a
-- `high` one is logged in `h` instead), so new mail queues behind the backlog and a booked row
-- coming due is allowed at its slot instead of being re-booked (issue 46, docs/decisions/
-- 0034-replicas-and-restored-bookings.md). The tenant's external recipients of those bookings
-- are counted by the tenant's own seed (seed_tenant.lua, from the same rows). Atomic: two
-- replicas seeding at once count the history once.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local spacing = tonumber(ARGV[2])
local high_share = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
if not (now and spacing and high_share and n) or #ARGV < 4 + 2 * n or (#ARGV - 4 - 2 * n) % 6 ~= 0 then
  return redis.error_reply('ERR paced seed: bad ARGV (see the header)')
end
local total, last = 0, 0
local function count(at, r)
  local b = math.floor(at / 60000)
  redis.call('HINCRBY', KEYS[1], 'd:' .. b, r)
  redis.call('HINCRBY', KEYS[1], 'H:' .. math.floor(b / 60), r)   -- the hour's sum
  redis.call('ZADD', KEYS[2], b, b)
  total = total + r
end
for i = 5, 4 + 2 * n, 2 do
  local at, r = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if at > now - 86400000 then
    count(at, r)
    -- 61 s: the direct check's window, 60 s + half the pacing allowance (PACING_ALLOWANCE, 2 s).
    if at > now - 61000 then redis.call('ZADD', KEYS[4], at, 'seed:' .. i .. ':' .. at) end
    if at > last then last = at end
  end
end
local tat = last > 0 and (last + spacing) or 0
local bmin, highs, booked = nil, {}, 0
for j = 5 + 2 * n, #ARGV, 6 do
  local id, slot, r, e = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local reason, class = ARGV[j + 4], ARGV[j + 5]
  count(slot, r)
  redis.call('HSET', KEYS[1], 'b:' .. id, slot .. ',' .. r .. ',' .. e .. ',' .. reason)
  redis.call('ZADD', KEYS[3], slot, id)
  if class == 'h' then
    highs[#highs + 1] = slot
  elseif reason ~= 'tenant' and slot + spacing > tat then
    tat = slot + spacing
  end
  if not bmin or slot < bmin then bmin = slot end
  booked = booked + 1
end
redis.call('HSET', KEYS[1], 'total', total, 'tat', tat, 'seeded', now, 'hs', 1,
  'bmin', bmin or '-', 'sp', spacing)   -- hour sums kept (check_and_reserve.lua)
if #highs > 0 then
  table.sort(highs)
  redis.call('HSET', KEYS[1], 'h', table.concat(highs, ',', math.max(#highs - high_share + 1, 1)))
end
for i = 1, 2 do redis.call('PEXPIRE', KEYS[i], 86400000 + 3600000) end
if booked > 0 then redis.call('PEXPIRE', KEYS[3], 86400000 + 3600000) end
redis.call('PEXPIRE', KEYS[4], 120000)
return 1
