-- Removes jobs of an apalis-redis queue that are in one of its sets: their id from that set,
-- their payload from the data hash, their meta hash. The finished jobs (the done set, which
-- apalis-redis's handle_results fills only with jobs acked Done: never a job in flight, waiting,
-- scheduled for a retry or dead; our cleanup reads candidates with SRANDMEMBER first) or the
-- dead ones (`mail-worker queue discard`). A job is removed only if its id is still in the set.
-- Every key it touches is in KEYS.
-- KEYS[1]: <queue>:done or <queue>:dead   KEYS[2]: <queue>:data
-- KEYS[2 + n]: <queue>:meta:<ARGV[n]>   ARGV[n]: task id n
-- Returns how many jobs were removed.
local removed = 0
for n = 1, #ARGV do
  if redis.call('SREM', KEYS[1], ARGV[n]) == 1 then
    redis.call('HDEL', KEYS[2], ARGV[n])
    redis.call('DEL', KEYS[2 + n])
    removed = removed + 1
  end
end
return removed
