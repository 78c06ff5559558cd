-- A stopping worker leaves an apalis-redis queue: what is left in its in-flight set goes back
-- to the front of the active list, and its name, in-flight set and metadata hash are removed
-- (apalis-redis 1.0's own close removes none of them: its ZREM names the in-flight set, not the
-- worker).
-- KEYS[1]: <queue>:workers   KEYS[2]: <queue>:inflight:<worker>   KEYS[3]: <queue>:active
-- KEYS[4]: <queue>:workers:metadata:<worker>   KEYS[5]: <queue>:signal
-- KEYS[6]: <queue>:workers:started (ours: see forget_workers.lua)
-- ARGV[1]: the worker's name
local left = redis.call('SMEMBERS', KEYS[2])
if #left > 0 then
  redis.call('LPUSH', KEYS[3], unpack(left))
  redis.call('DEL', KEYS[5])
  redis.call('LPUSH', KEYS[5], 1)
end
redis.call('DEL', KEYS[2], KEYS[4])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
return #left
