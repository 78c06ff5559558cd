-- Pushes campaign lines onto mail-worker's intake queue (an apalis-redis 1.0 queue, docs/queue.md),
-- what apalis-redis's own push does, atomically: a job whose task id is already in the queue is
-- skipped (HSETNX), so a producer that retries a push after an error never queues a line twice.
-- KEYS[1]: <queue>:data   KEYS[2]: <queue>:active   KEYS[3]: <queue>:signal
-- ARGV[1]: <queue>:meta (the meta hashes' prefix; same hash tag)
-- ARGV[2], ARGV[3], …: task id, line, task id, line, …
-- Records each job's push time (Redis's clock, Unix seconds) as `pushed_at` in its meta hash
-- (the queue's oldest-job age).
-- Returns how many jobs were pushed.
local pushed = 0
local now = redis.call('TIME')[1]
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HSETNX', KEYS[1], id, ARGV[i + 1]) == 1 then
    redis.call('HSET', ARGV[1] .. ':' .. id,
      'attempts', 0, 'max_attempts', 25, 'status', 'Pending', 'idempotency_key', '',
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
