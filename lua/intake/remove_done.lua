-- Removes up to ARGV[2] finished (Done) jobs of an apalis-redis queue: their id from the done
-- set, their payload from the data hash, their meta hash. Only ids in the done set are touched,
-- which apalis-redis's handle_results adds only for a job acked Done: never a job in flight,
-- waiting, scheduled for a retry or dead.
-- KEYS[1]: <queue>:done   KEYS[2]: <queue>:data
-- ARGV[1]: <queue>:meta (the meta hashes' prefix; same hash tag)   ARGV[2]: the most to remove
local ids = redis.call('SPOP', KEYS[1], tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('HDEL', KEYS[2], id)
  redis.call('DEL', ARGV[1] .. ':' .. id)
end
return #ids
