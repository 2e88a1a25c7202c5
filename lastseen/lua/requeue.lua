-- Make dirty again up to ARGV[2] users claimed before ARGV[1] (ms): their
-- flusher died or hangs between claim and write.
-- KEYS[1] claimed   KEYS[2] dirty
-- Returns how many users were requeued.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('SADD', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
end
return #ids
