-- KEYS[1] mailbox state (hash)   KEYS[2] mailbox day buckets (zset)
-- KEYS[4] reservations of the last 60 s (zset)   KEYS[6] tenant state (hash)
-- KEYS[7] tenant day buckets (zset)   (KEYS[3], KEYS[5] not touched)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)   ARGV[2] pacing spacing (ms)
-- then triples: ARGV[3k] sent at (ms), ARGV[3k+1] recipients, ARGV[3k+2] external recipients
-- Returns {recorded, now, total}: how many sends were added, the time used, the mailbox's
--         recipients in its 24 h window after; {-1, now, 0} when the mailbox has no state
--
-- Adds the sends one process made while failing open (Redis unreachable) to the mailbox's
-- shared windows before its next decision: the 60 s reservations, the day buckets, the
-- tenant's buckets (when the tenant has state) and the pacing (`tat` behind the last of them).
-- Without state (Redis came back empty) nothing is added: the seed from PostgreSQL's send
-- history counts them. A send older than the mailbox's seed is skipped likewise (the history
-- the seed read already held it). Sends older than 24 h are skipped.

local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local spacing = tonumber(ARGV[2])
if not (now and spacing) or #ARGV % 3 ~= 2 then
  return redis.error_reply('ERR paced record_fail_open: bad ARGV (see the header)')
end
local state = redis.call('HMGET', KEYS[1], 'tat', 'seeded', 'total')
if not state[1] and not state[2] then
  return {-1, now, 0}
end
local tat = tonumber(state[1] or '0')
local seeded = tonumber(state[2] or '0')
local total = tonumber(state[3] or '0')
local tenant = redis.call('HEXISTS', KEYS[6], 'total') == 1
local KEY_TTL_MS = 86400000 + 3600000

local function add(hash, buckets, at, amount)
  local b = math.floor(at / 60000)
  redis.call('HINCRBY', hash, 'd:' .. b, amount)
  redis.call('HINCRBY', hash, 'H:' .. math.floor(b / 60), amount)   -- the hour's sum
  redis.call('ZADD', buckets, b, b)
  return redis.call('HINCRBY', hash, 'total', amount)
end

local recorded, last = 0, 0
for i = 3, #ARGV, 3 do
  local at, r, e = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if at > seeded and at > now - 86400000 then
    total = add(KEYS[1], KEYS[2], at, r)
    if tenant and e > 0 then add(KEYS[6], KEYS[7], at, e) end
    -- 61 s: the direct check's window, 60 s + half the pacing allowance (PACING_ALLOWANCE, 2 s).
    if at > now - 61000 then redis.call('ZADD', KEYS[4], at, 'fail-open:' .. now .. ':' .. i .. ':' .. at) end
    if at > last then last = at end
    recorded = recorded + 1
  end
end
if recorded > 0 then
  redis.call('HSET', KEYS[1], 'tat', math.max(tat, last + spacing))
  redis.call('HDEL', KEYS[1], 'lo')   -- older buckets than it knew: the next check looks
  for _, i in ipairs({1, 2, 4}) do redis.call('PEXPIRE', KEYS[i], KEY_TTL_MS) end
  if tenant then
    redis.call('PEXPIRE', KEYS[6], KEY_TTL_MS)
    redis.call('PEXPIRE', KEYS[7], KEY_TTL_MS)
  end
end
return {recorded, now, total}
