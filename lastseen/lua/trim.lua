-- Forget up to ARGV[2] users whose time is before ARGV[1] (ms) and who are
-- neither dirty nor claimed: the store holds their time. Looks at no more
-- than twice the limit, so a crowd of old dirty users cannot make it slow.
-- KEYS[1] times   KEYS[2] dirty   KEYS[3] claimed
-- Returns how many users were forgotten.
local limit = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, limit * 2)
local n = 0
for _, id in ipairs(ids) do
  if n >= limit then
    break
  end
  if redis.call('SISMEMBER', KEYS[2], id) == 0 and not redis.call('ZSCORE', KEYS[3], id) then
    redis.call('ZREM', KEYS[1], id)
    n = n + 1
  end
end
return n
