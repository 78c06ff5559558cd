-- Registers a worker on an apalis-redis queue on a Redis Cluster: apalis-redis 1.0.0's
-- register_worker.lua without its `ZADD core:apalis:queues:list` (a key outside KEYS and outside
-- the queue's hash tag, so refused by a cluster node that does not own its slot; nothing of ours
-- reads it). Same KEYS and ARGV as apalis-redis's script, which src/intake/connection.rs replaces
-- with this one on a cluster.
-- KEYS[1]: <queue>:workers   KEYS[2]: <queue>:workers:metadata:<worker>
-- ARGV[1]: now (unix seconds)   ARGV[2]: the worker's name   ARGV[3]: how long a worker's last
-- beat keeps its name taken (seconds)   ARGV[4]: backend name   ARGV[5]: service
local now = tonumber(ARGV[1])
local last_seen = redis.call('ZSCORE', KEYS[1], ARGV[2])
if last_seen and now - tonumber(last_seen) < tonumber(ARGV[3]) then
  error('worker is still active within threshold')
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('HSET', KEYS[2], 'backend_name', ARGV[4], 'service', ARGV[5])
return true
