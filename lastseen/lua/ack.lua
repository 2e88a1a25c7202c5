-- End a claim made at ARGV[1] (ms). Users claimed again since (by another
-- flusher, after a requeue) keep that newer claim. With ARGV[2] = "1" the
-- write failed and the users become dirty again.
-- KEYS[1] claimed   KEYS[2] dirty
-- ARGV    claim time, release flag, user1, user2, ...
local at = tonumber(ARGV[1])
local release = ARGV[2] == '1'
for i = 3, #ARGV do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) == at then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
  if release then
    redis.call('SADD', KEYS[2], ARGV[i])
  end
end
return #ARGV - 2
