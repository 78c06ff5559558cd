-- Deletes dead jobs of an apalis-redis queue: id, payload, meta.
-- KEYS[1]: <queue>:dead   KEYS[2]: <queue>:data
-- ARGV[1]: <queue>:meta (prefix)   ARGV[2..]: task ids
local removed = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('SREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    redis.call('DEL', ARGV[1] .. ':' .. id)
    removed = removed + 1
  end
end
return removed
