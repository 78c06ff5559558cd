-- KEYS[1]-KEYS[4] as in check_and_reserve.lua (not touched; passed so every call names one slot)
-- KEYS[5] requests in flight (zset: id -> lease expiry ms)   KEYS[6], KEYS[7] not touched
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)
-- ARGV[2] message id   ARGV[3] lease ms
-- ARGV[4] (optional) an absolute expiry, ms on the limiter's clock: the lease of a send cut off
--         mid-request is set to end then (its latest request's start + HTTP_TIMEOUT), even
--         when that is sooner than the lease's present expiry; ARGV[3] is then not used
-- Returns 1 when the lease was renewed (or set), 0 when the message holds none (released, or
-- expired and pruned: it is not taken again)
--
-- A running attempt renews its in-flight lease every third of the lease, so a lease outlives
-- its attempt by at most one lease (a killed or cut-off worker's slot frees within it) however
-- long the attempt runs. Never shortens a lease but to an absolute expiry; never creates one.
-- Two commands.

local now = tonumber(ARGV[1])   -- `TIME`: Redis's clock (seconds, microseconds) in ms
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
local id = ARGV[2]
local lease_ms = tonumber(ARGV[3])
local until_ms = ARGV[4] and tonumber(ARGV[4])
if not (now and lease_ms) or id == nil or id == '' or (ARGV[4] and not until_ms) then
  return redis.error_reply('ERR paced renew: bad ARGV (see the header)')
end
if until_ms then
  if not redis.call('ZSCORE', KEYS[5], id) then return 0 end
  redis.call('ZADD', KEYS[5], 'XX', until_ms, id)
  return 1
end
return redis.call('ZADD', KEYS[5], 'XX', 'GT', 'CH', now + lease_ms, id)
