-- Raise users' last-seen times (never lower them) and mark dirty the users
-- whose time rose.
-- KEYS[1] times (zset user → ms)   KEYS[2] dirty (set)
-- ARGV    user1, ms1, user2, ms2, ...
-- Returns how many users were marked dirty.
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], 'GT', 'CH', ARGV[i + 1], ARGV[i]) == 1 then
    redis.call('SADD', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n
