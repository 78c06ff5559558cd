-- Pushes campaign lines onto mail-worker's intake queue (an apalis-redis 1.0 queue, docs/queue.md),
-- what apalis-redis's own push does, atomically: a job whose task id is already in the queue is
-- skipped (HSETNX), so a producer that retries a push after an error never queues a line twice.
-- Every key it touches is in KEYS, all under the queue's name (one hash tag on a cluster).
-- KEYS[1]: <queue>:data   KEYS[2]: <queue>:active   KEYS[3]: <queue>:signal
-- KEYS[3 + n]: <queue>:meta:<task id n>, for each job n = 1, 2, …
-- ARGV[2n - 1], ARGV[2n]: task id n, line n
-- Records each job's push time (Redis's clock, Unix seconds) as `pushed_at` in its meta hash
-- (the queue's oldest-job age).
-- Returns how many jobs were pushed.
local queue = string.sub(KEYS[1], 1, -6)
if string.sub(KEYS[1], -5) ~= ':data' or #KEYS ~= 3 + #ARGV / 2 or #ARGV % 2 ~= 0 then
  error('push.lua: KEYS must be <queue>:data, :active, :signal, then :meta:<id> of each (id, line) pair of ARGV')
end
local pushed = 0
local now = redis.call('TIME')[1]
for n = 1, #ARGV / 2 do
  local id = ARGV[2 * n - 1]
  local meta = KEYS[3 + n]
  if meta ~= queue .. ':meta:' .. id then
    error('push.lua: KEYS[' .. (3 + n) .. '] must be ' .. queue .. ':meta:' .. id)
  end
  if redis.call('HSETNX', KEYS[1], id, ARGV[2 * n]) == 1 then
    redis.call('HSET', meta, 'attempts', 0, 'max_attempts', 25, 'status', 'Pending', 'idempotency_key', '',
      'pushed_at', now)
    redis.call('RPUSH', KEYS[2], id)
    pushed = pushed + 1
  end
end
if pushed > 0 then
  redis.call('DEL', KEYS[3])
  redis.call('LPUSH', KEYS[3], 1)
end
return pushed
