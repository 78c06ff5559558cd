-- KEYS[1]  minute counter key      KEYS[2]  day counter key
-- ARGV[1]  recipients
-- Returns  {minute counter, day counter} after the release
--
-- Gives back one reservation made by check_and_reserve.lua: minute -= 1, day -= recipients,
-- never below 0. A missing (expired) key stays missing and counts as 0; DECRBY keeps the TTL
-- of an existing key, so no path leaves a key without a TTL.

local recipients = tonumber(ARGV[1])
if not recipients or recipients < 1 then
  return redis.error_reply('ERR release: ARGV[1] must be a number >= 1')
end

local function give_back(key, amount)
  local current = redis.call('GET', key)
  if not current then
    return 0
  end
  current = tonumber(current)
  local taken = math.min(current, amount)
  if taken > 0 then
    return redis.call('DECRBY', key, taken)
  end
  return current
end

return {give_back(KEYS[1], 1), give_back(KEYS[2], recipients)}
