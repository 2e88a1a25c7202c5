-- Take up to ARGV[1] dirty users and claim them at ARGV[2] (ms): they move
-- from the dirty set to the claimed zset, scored by claim time, in one step,
-- so a flusher that dies after this call loses nothing (requeue.lua gives
-- stale claims back).
-- KEYS[1] times   KEYS[2] dirty   KEYS[3] claimed
-- Returns user1, ms1, user2, ms2, ... (their times when claimed).
local ids = redis.call('SPOP', KEYS[2], ARGV[1])
local out = {}
for _, id in ipairs(ids) do
  local ms = redis.call('ZSCORE', KEYS[1], id)
  if ms then
    redis.call('ZADD', KEYS[3], ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = ms
  end
end
return out
