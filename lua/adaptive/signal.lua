-- One adaptive signal (src/rate_limit/adaptive/signal.rs): counts it in the rule's rolling
-- window for one scope and, at the threshold, starts the rule's action.
-- KEYS[1]: the signals (zset: member -> ms), KEYS[2]: the action in force (string, JSON).
-- ARGV: now_ms, window_ms, threshold, member, action JSON, action TTL ms, its held permille.
-- Returns {fired, count}: fired 1 = the action was set; 2 = the threshold was reached but a
-- stronger action (an operator's, or one holding a lower factor) stays; 0 = below threshold.
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local threshold = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], window)
local count = redis.call('ZCARD', KEYS[1])
if count < threshold then
  return {0, count}
end
local current = redis.call('GET', KEYS[2])
if current then
  local ok, held = pcall(cjson.decode, current)
  if ok and (held.rule == 'operator'
      or (now < tonumber(held.heldUntilMs) and tonumber(held.heldPermille) < tonumber(ARGV[7]))) then
    return {2, count}
  end
end
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
redis.call('DEL', KEYS[1])
return {1, count}
