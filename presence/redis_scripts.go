package presence

import "github.com/redis/go-redis/v9"

// Redis data model (P = the key prefix; {…} are Redis Cluster hash tags so
// that each script's keys share a slot):
//
// per conversation C, slot {c:C}
//   P:{c:C}:on   ZSET user → last refresh ms        who is online
//   P:{c:C}:sk   ZSET socket → last refresh ms      their sockets
//   P:{c:C}:su   HASH socket → user
//   P:{c:C}:m    HASH user → "n|since|graceDeadline|leftAt" (n = sockets here)
//   P:{c:C}:ty   ZSET user → typing expiry ms       who is typing
//   P:{c:C}:tyo  HASH user → socket that typed last
// cluster-wide, slot {g}
//   P:{g}:users  HASH user → "n|activity|status|graceDeadline|disconnectedAt"
//   P:{g}:usk:U  SET of U's sockets (n above is its size)
//   P:{g}:due    ZSET timer → due ms   ("t\tC" typing expiry, "g\tC\tU" grace
//                of U in C, "u\tU" grace of U, "a\tU" away check of U)
//   P:{g}:nodes  ZSET node → last lease renewal ms
//   P:{g}:reap   ZSET "node\tleaseMs" → claim ms   (dead nodes being cleaned)
// per node N, slot {n:N}
//   P:{n:N}:socks HASH socket → "user\tC1\tC2…"     what N must clean if it dies
//
// Every conversation key expires 3×TTL after its last write or refresh.

// convJoin adds a socket to a conversation.
// KEYS on sk su m ty; ARGV sid user now keyTTLms
// → {first(0|1), users[], since[], typing[]}
var convJoin = redis.NewScript(rosterLib + `
local on, sk, su, m, ty = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local sid, user, now, kttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local first = 0
if redis.call('HEXISTS', su, sid) == 0 then
  redis.call('HSET', su, sid, user)
  redis.call('ZADD', sk, now, sid)
  local v = redis.call('HGET', m, user)
  if not v then
    first = 1
    redis.call('HSET', m, user, '1|' .. now .. '|0|0')
  else
    local n, since = string.match(v, '^(%d+)|(%d+)|')
    redis.call('HSET', m, user, (tonumber(n) + 1) .. '|' .. since .. '|0|0')
  end
  redis.call('ZADD', on, 'GT', now, user) -- GT still adds a new member
end
for _, k in ipairs({on, sk, su, m}) do redis.call('PEXPIRE', k, kttl) end
local users, since, typing = roster(on, m, ty, now)
return {first, users, since, typing}
`)

// convRoster reads a conversation's roster.
// KEYS on m ty; ARGV now → {users[], since[], typing[]}
var convRoster = redis.NewScript(rosterLib + `
local now = tonumber(ARGV[1])
local users, since, typing = roster(KEYS[1], KEYS[2], KEYS[3], now)
return {users, since, typing}
`)

// rosterLib reads a conversation's roster: who is online, since when
// (from the member records), and who is typing now.
const rosterLib = `
local function roster(on, m, ty, now)
  local users = redis.call('ZRANGE', on, 0, -1)
  local since = {}
  if #users > 0 then
    local vals = redis.call('HMGET', m, unpack(users))
    for i, v in ipairs(vals) do
      since[i] = v and string.match(v, '^%d+|(%d+)|') or tostring(now)
    end
  end
  return users, since, redis.call('ZRANGEBYSCORE', ty, '(' .. now, '+inf')
end
`

// convLeave removes a socket from a conversation. mode: "left" (leave now),
// "grace" (the user's leave waits for graceDeadline), "timeout" (leave now,
// at = atMs).
// KEYS on sk su m ty tyo; ARGV sid user now mode graceDeadline atMs
// → {typingStopped(0|1), left(0|1), at}
var convLeave = redis.NewScript(`
local on, sk, su, m, ty, tyo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local sid, user, now, mode, deadline, at = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
if redis.call('HGET', su, sid) ~= user then return {0, 0, 0} end
redis.call('HDEL', su, sid)
redis.call('ZREM', sk, sid)
local stopped = 0
if redis.call('HGET', tyo, user) == sid then
  redis.call('HDEL', tyo, user)
  local exp = redis.call('ZSCORE', ty, user)
  redis.call('ZREM', ty, user)
  if exp and tonumber(exp) > now then stopped = 1 end
end
local v = redis.call('HGET', m, user)
if not v then return {stopped, 0, 0} end
local n, since = string.match(v, '^(%d+)|(%d+)|')
n = tonumber(n) - 1
if n > 0 then
  redis.call('HSET', m, user, n .. '|' .. since .. '|0|0')
  return {stopped, 0, 0}
end
if mode == 'grace' then
  redis.call('HSET', m, user, '0|' .. since .. '|' .. deadline .. '|' .. now)
  return {stopped, 0, 0}
end
redis.call('HDEL', m, user)
redis.call('ZREM', on, user)
local exp = redis.call('ZSCORE', ty, user)
if exp then
  redis.call('ZREM', ty, user)
  redis.call('HDEL', tyo, user)
  if tonumber(exp) > now then stopped = 1 end
end
return {stopped, 1, at}
`)

// convGrace ends a user's flap grace in a conversation if it is still due.
// KEYS on m ty tyo; ARGV user now → {left(0|1), leftAt, typingStopped}
var convGrace = redis.NewScript(`
local on, m, ty, tyo = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user, now = ARGV[1], tonumber(ARGV[2])
local v = redis.call('HGET', m, user)
if not v then return {0, 0, 0} end
local n, since, deadline, left = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)$')
if tonumber(n) > 0 or tonumber(deadline) == 0 or tonumber(deadline) > now then return {0, 0, 0} end
redis.call('HDEL', m, user)
redis.call('ZREM', on, user)
local stopped = 0
local exp = redis.call('ZSCORE', ty, user)
if exp then
  redis.call('ZREM', ty, user)
  redis.call('HDEL', tyo, user)
  if tonumber(exp) > now then stopped = 1 end
end
return {1, tonumber(left), stopped}
`)

// typingStart records typing. KEYS ty tyo su; ARGV sid user now expiry
// → -1 not joined, 1 started, 0 refreshed
var typingStart = redis.NewScript(`
local ty, tyo, su = KEYS[1], KEYS[2], KEYS[3]
local sid, user, now, expiry = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if redis.call('HGET', su, sid) ~= user then return -1 end
local cur = redis.call('ZSCORE', ty, user)
redis.call('ZADD', ty, expiry, user)
redis.call('HSET', tyo, user, sid)
local kttl = redis.call('PTTL', su)
if kttl > 0 then
  redis.call('PEXPIRE', ty, kttl)
  redis.call('PEXPIRE', tyo, kttl)
end
if cur and tonumber(cur) > now then return 0 end
return 1
`)

// typingStop clears typing. KEYS ty tyo su; ARGV sid user now
// → -1 not joined, 1 stopped, 0 was not typing
var typingStop = redis.NewScript(`
local ty, tyo, su = KEYS[1], KEYS[2], KEYS[3]
local sid, user, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HGET', su, sid) ~= user then return -1 end
local cur = redis.call('ZSCORE', ty, user)
if not cur then return 0 end
redis.call('ZREM', ty, user)
redis.call('HDEL', tyo, user)
if tonumber(cur) > now then return 1 end
return 0
`)

// typingExpire removes expired typing entries.
// KEYS ty tyo; ARGV now → {users[], nextExpiry or 0}
var typingExpire = redis.NewScript(`
local ty, tyo = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local users = redis.call('ZRANGEBYSCORE', ty, '-inf', now)
for _, u in ipairs(users) do
  redis.call('ZREM', ty, u)
  redis.call('HDEL', tyo, u)
end
local nxt = redis.call('ZRANGE', ty, 0, 0, 'WITHSCORES')
local n = 0
if #nxt > 0 then n = tonumber(nxt[2]) end
return {users, n}
`)

// The user record: "n|activity|status|graceDeadline|disconnectedAt", status
// one of on, away, off. userLib parses and writes it.
const userLib = `
local function uget(h, user)
  local v = redis.call('HGET', h, user)
  if not v then return nil end
  local n, act, st, grace, disc = string.match(v, '^(%d+)|(%d+)|(%a+)|(%d+)|(%d+)$')
  return {n = tonumber(n), act = tonumber(act), st = st, grace = tonumber(grace), disc = tonumber(disc)}
end
local function uset(h, user, u)
  redis.call('HSET', h, user, u.n .. '|' .. u.act .. '|' .. u.st .. '|' .. u.grace .. '|' .. u.disc)
end
`

// userConnect counts a new connection of a user: its socket joins the
// user's socket set (so that counting is idempotent per socket).
// KEYS users due usk; ARGV user sid now awayAfter → 1 if the user came online
var userConnect = redis.NewScript(userLib + `
local h, due, usk = KEYS[1], KEYS[2], KEYS[3]
local user, sid, now, away = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local u = uget(h, user) or {n = 0, act = now, st = 'off', grace = 0, disc = 0}
redis.call('SADD', usk, sid)
u.n = redis.call('SCARD', usk)
u.grace = 0
u.act = now
local came = 0
if u.st ~= 'on' then u.st = 'on'; came = 1 end
uset(h, user, u)
redis.call('ZREM', due, 'u\t' .. user)
redis.call('ZADD', due, now + away, 'a\t' .. user)
return came
`)

// userDisconnect uncounts a connection (a socket not counted is a no-op).
// mode grace: offline waits for the deadline; timeout: offline now with
// lastSeen atMs.
// KEYS users due usk; ARGV user sid now mode deadline atMs → {offline(0|1), lastSeen}
var userDisconnect = redis.NewScript(userLib + `
local h, due, usk = KEYS[1], KEYS[2], KEYS[3]
local user, sid, now, mode, deadline, at = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
if redis.call('SREM', usk, sid) == 0 then return {0, 0} end
local u = uget(h, user)
if not u then return {0, 0} end
u.n = redis.call('SCARD', usk)
if u.n > 0 then uset(h, user, u); return {0, 0} end
if mode == 'grace' then
  u.grace = deadline
  u.disc = now
  uset(h, user, u)
  redis.call('ZADD', due, deadline, 'u\t' .. user)
  return {0, 0}
end
redis.call('HDEL', h, user)
redis.call('ZREM', due, 'u\t' .. user, 'a\t' .. user)
return {1, at}
`)

// userGrace ends a user's flap grace if still due.
// KEYS users due; ARGV user now → {offline(0|1), disconnectedAt}
var userGrace = redis.NewScript(userLib + `
local h, due = KEYS[1], KEYS[2]
local user, now = ARGV[1], tonumber(ARGV[2])
local u = uget(h, user)
if not u or u.n > 0 or u.grace == 0 or u.grace > now then return {0, 0} end
redis.call('HDEL', h, user)
redis.call('ZREM', due, 'a\t' .. user)
return {1, u.disc}
`)

// userActivity records activity. KEYS users due; ARGV user now awayAfter
// → 1 if an away user came back online
var userActivity = redis.NewScript(userLib + `
local h, due = KEYS[1], KEYS[2]
local user, now, away = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local u = uget(h, user)
if not u then return 0 end
local back = 0
if u.st == 'away' then u.st = 'on'; back = 1 end
if back == 0 and now - u.act < 1000 then return 0 end
u.act = now
uset(h, user, u)
redis.call('ZADD', due, now + away, 'a\t' .. user)
return back
`)

// userAway turns a connected, idle user away. KEYS users; ARGV user now
// awayAfter → 1 if the user turned away
var userAway = redis.NewScript(userLib + `
local h = KEYS[1]
local user, now, away = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local u = uget(h, user)
if not u or u.n == 0 or u.st ~= 'on' or u.act + away > now then return 0 end
u.st = 'away'
uset(h, user, u)
return 1
`)

// popDue claims due timers: whoever pops one owns it.
// KEYS due; ARGV now limit → members
var popDue = redis.NewScript(`
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #items > 0 then redis.call('ZREM', KEYS[1], unpack(items)) end
return items
`)

// claimDead moves nodes whose lease lapsed to the reap set, and reclaims
// reaps abandoned by a reaper that died. KEYS nodes reap; ARGV now leaseTTL
// reclaimAfter → {"node\tleaseMs", …} claimed by the caller
var claimDead = redis.NewScript(`
local nodes, reap = KEYS[1], KEYS[2]
local now, lease, reclaim = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
local dead = redis.call('ZRANGEBYSCORE', nodes, '-inf', now - lease, 'WITHSCORES')
for i = 1, #dead, 2 do
  redis.call('ZREM', nodes, dead[i])
  local item = dead[i] .. '\t' .. dead[i + 1]
  redis.call('ZADD', reap, now, item)
  table.insert(out, item)
end
local stale = redis.call('ZRANGEBYSCORE', reap, '-inf', now - reclaim)
for _, item in ipairs(stale) do
  redis.call('ZADD', reap, now, item)
  table.insert(out, item)
end
return out
`)
