-- KEYS[1] mailbox state (hash)   KEYS[2] bookings (zset: message id -> slot ms)
-- Returns the recipients the mailbox's bookings hold in its day window: booked, not sent. Read
-- only (`mail-worker mailbox usage`, the budget gauge, `mail.budget.nearlyUsed`): the state's
-- `total` counts them with the sent ones, and a backlog booked into tomorrow is not a budget
-- used today (issue 46, point 7). One HMGET per 1,000 bookings.

local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local sum = 0
for from = 1, #ids, 1000 do
  local fields = {}
  for i = from, math.min(from + 999, #ids) do fields[#fields + 1] = 'b:' .. ids[i] end
  local got = redis.call('HMGET', KEYS[1], unpack(fields))
  for _, booking in ipairs(got) do
    if booking then
      local r = string.match(booking, '^[^,]*,([^,]*)')   -- slot,recipients,external,reason
      sum = sum + (tonumber(r) or 0)
    end
  end
end
return sum
