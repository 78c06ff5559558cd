-- KEYS[1] mailbox state (hash)            KEYS[4] reservations of the last 60 s (zset)
-- KEYS[5] requests in flight (zset)       KEYS[6] tenant state (hash)
-- (KEYS[2], KEYS[3], KEYS[7] as in check_and_reserve.lua; passed so every call names one slot)
-- ARGV[1] message id   ARGV[2] "done" | "unsent"   ARGV[3] the reservation's time (ms)
-- ARGV[4] recipients   ARGV[5] external recipients counted against the tenant
-- ARGV[6] optional: how long the request ran (ms, as the caller measured it); "done" only
-- Returns {leases freed (0 or 1), recipients given back to the mailbox}
--
-- Ends one allowed request. "done" (sent, or outcome unknown: it may have been delivered) frees
-- the in-flight lease and keeps every budget. "unsent" (the request surely never reached the
-- provider) also gives back the recipients and the 60 s reservation. The pacing slot is not
-- given back (the next message simply finds it in the past). Never goes below zero. Two
-- commands for "done" (EVALSHA and its ZREM): nothing is read back that no caller uses. The
-- minute bucket `d:<minute>` and its hour's sum `H:<hour>` shrink together (check_and_reserve.lua).
-- With ARGV[6], a freed lease also moves the mailbox's mean request duration (field `rd`, a
-- moving average weighting the newest 1/4) that check_and_reserve.lua spaces the in-flight
-- queue's turns by (two more commands; nothing written to a mailbox without state).

local id = ARGV[1]
local mode = ARGV[2]
local at = tonumber(ARGV[3])
local recipients = tonumber(ARGV[4])
local external = tonumber(ARGV[5])
local took = tonumber(ARGV[6] or '0')
if not (at and recipients and external and took) or (mode ~= 'done' and mode ~= 'unsent') then
  return redis.error_reply('ERR paced release: bad ARGV (see the header)')
end

local freed = redis.call('ZREM', KEYS[5], id)
if freed == 1 and mode == 'done' and took > 0 then
  local known = redis.call('HMGET', KEYS[1], 'rd', 'seeded', 'tat')
  if known[2] or known[3] then
    local rd = tonumber(known[1] or '')
    redis.call('HSET', KEYS[1], 'rd', rd and math.floor((3 * rd + took) / 4) or math.floor(took))
  end
end
local given_back = 0
if mode == 'unsent' then
  redis.call('ZREM', KEYS[4], id .. ':' .. at)
  local function take_back(state, amount)
    if amount <= 0 then return end
    local b = math.floor(at / 60000)
    local field = 'd:' .. b
    local have = tonumber(redis.call('HGET', state, field) or '0')
    local back = math.min(have, amount)
    if back > 0 then
      redis.call('HINCRBY', state, field, -back)
      redis.call('HINCRBY', state, 'H:' .. math.floor(b / 60), -back)   -- its hour's sum
      redis.call('HINCRBY', state, 'total', -back)
    end
    return back
  end
  given_back = take_back(KEYS[1], recipients) or 0
  take_back(KEYS[6], external)
end
return {freed, given_back}
