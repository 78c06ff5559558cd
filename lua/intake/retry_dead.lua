-- Puts dead jobs of an apalis-redis queue back on its active list, attempts reset. Every key it
-- touches is in KEYS.
-- KEYS[1]: <queue>:dead   KEYS[2]: <queue>:active   KEYS[3]: <queue>:signal
-- KEYS[3 + n]: <queue>:meta:<ARGV[n]>   ARGV[n]: task id n
local moved = 0
for n = 1, #ARGV do
  if redis.call('SREM', KEYS[1], ARGV[n]) == 1 then
    redis.call('HSET', KEYS[3 + n], 'status', 'Pending', 'attempts', 0)
    redis.call('HDEL', KEYS[3 + n], 'result', 'done_at')
    redis.call('RPUSH', KEYS[2], ARGV[n])
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('DEL', KEYS[3])
  redis.call('LPUSH', KEYS[3], 1)
end
return moved
