-- KEYS[1] mailbox state (hash)   KEYS[3] bookings (zset: message id -> slot ms)
-- KEYS[6] tenant state (hash)    (KEYS[2], KEYS[4], KEYS[5], KEYS[7] not touched)
-- ARGV[1] now: `TIME` (Redis's clock) or ms since the epoch (tests)
-- ARGV[2..] the message ids whose bookings go; none: every booking of the mailbox
-- Returns {dropped, recipients}: the bookings dropped and the recipients given back
--
-- Drops bookings before their slot: a message cancelled or retried by an operator (the retry
-- takes a fresh decision), or every booking after the mailbox's limits changed (its messages
-- go as soon as the new limits allow, not at the slots the old ones gave). Each booking's
-- recipients leave the day bucket of its slot (and the tenant's), never below zero. Dropping
-- every booking also brings the next free slot (`tat`) back to now: the direct 60 s check still
-- holds the L + 1st send.

local now = tonumber(ARGV[1])
if ARGV[1] == 'TIME' then local t = redis.call('TIME'); now = t[1] * 1000 + math.floor(t[2] / 1000) end
if not now then return redis.error_reply('ERR paced unbook: bad ARGV (see the header)') end

local function give_back(hash, at, amount)
  if amount <= 0 then return 0 end
  local b = math.floor(at / 60000)
  local back = math.min(tonumber(redis.call('HGET', hash, 'd:' .. b) or '0'), amount)
  if back > 0 then
    redis.call('HINCRBY', hash, 'd:' .. b, -back)
    redis.call('HINCRBY', hash, 'H:' .. math.floor(b / 60), -back)
    redis.call('HINCRBY', hash, 'total', -back)
  end
  return back
end

local all = #ARGV < 2
local ids = {}
if all then ids = redis.call('ZRANGE', KEYS[3], 0, -1) else for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end end
local dropped, recipients = 0, 0
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[1], 'b:' .. id)
  if raw then
    local f = {}
    for part in string.gmatch(raw, '[^,]+') do f[#f + 1] = part end
    local slot = tonumber(f[1])
    recipients = recipients + give_back(KEYS[1], slot, tonumber(f[2]))
    give_back(KEYS[6], slot, tonumber(f[3]))
    redis.call('HDEL', KEYS[1], 'b:' .. id)
    dropped = dropped + 1
  end
  redis.call('ZREM', KEYS[3], id)
end
if all and redis.call('EXISTS', KEYS[1]) == 1 then
  local tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or '0')
  if tat > now then redis.call('HSET', KEYS[1], 'tat', now) end
end
if dropped > 0 then
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
  redis.call('HSET', KEYS[1], 'bmin', first or '-')
end
return {dropped, recipients}
