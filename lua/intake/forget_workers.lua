-- Forgets the workers of an apalis-redis queue that died without leaving (SIGKILL, a lost node):
-- apalis-redis's heartbeat re-enqueues a silent worker's in-flight jobs and drops it from
-- <queue>:workers, but keeps its <queue>:workers:metadata:<name> hash for good. Each worker is
-- listed in <queue>:workers:started (score: its start, Unix s) when it starts, and removed from it
-- when it leaves (leave.lua). A listed worker started and silent for longer than the orphan
-- threshold, whose in-flight set is empty (its jobs re-enqueued by apalis-redis, or it held
-- none), loses its registration, its metadata and its entry here. A worker whose beat is recent
-- is never touched, nor one whose in-flight set still holds jobs.
-- KEYS[1]: <queue>:workers   KEYS[2]: <queue>:workers:started
-- ARGV[1]: <queue>:workers:metadata: (prefix)   ARGV[2]: <queue>:inflight: (prefix)
-- ARGV[3]: now (Unix s)   ARGV[4]: the orphan threshold (s)
-- Returns how many workers were forgotten.
local before = tonumber(ARGV[3]) - tonumber(ARGV[4])
local forgotten = 0
for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', before)) do
  local beat = redis.call('ZSCORE', KEYS[1], name)
  local silent = (not beat) or tonumber(beat) <= before
  if silent and redis.call('EXISTS', ARGV[2] .. name) == 0 then
    redis.call('ZREM', KEYS[1], name)
    redis.call('DEL', ARGV[1] .. name)
    redis.call('ZREM', KEYS[2], name)
    forgotten = forgotten + 1
  end
end
return forgotten
