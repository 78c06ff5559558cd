-- Puts dead jobs of an apalis-redis queue back on its active list, attempts reset.
-- KEYS[1]: <queue>:dead   KEYS[2]: <queue>:active   KEYS[3]: <queue>:signal
-- ARGV[1]: <queue>:meta (prefix)   ARGV[2..]: task ids
local moved = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('SREM', KEYS[1], id) == 1 then
    redis.call('HSET', ARGV[1] .. ':' .. id, 'status', 'Pending', 'attempts', 0)
    redis.call('HDEL', ARGV[1] .. ':' .. id, 'result', 'done_at')
    redis.call('RPUSH', KEYS[2], id)
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('DEL', KEYS[3])
  redis.call('LPUSH', KEYS[3], 1)
end
return moved
