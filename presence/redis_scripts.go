package presence

import "github.com/redis/go-redis/v9"

// Redis data model (P = the key prefix; {…} are Redis Cluster hash tags so
// that each script's keys share a slot):
//
// per conversation C, slot {c:C}
//   P:{c:C}:m    HASH user → "<since><sockets>", or "n|since|graceDeadline|
//                leftAt|" in the user's flap grace: who is online (users
//                in their flap grace included), and their sockets here
//                (joined by ","; see memberLib)
//   P:{c:C}:ty   ZSET user → typing expiry ms       who is typing (the node
//                that wrote an entry knows which socket typed: redis_typing.go)
//   P:{c:C}:ll:U STRING ms, for owedAfter and a minute: when U's presence in
//                C was spoken for after records were lost (markSpoken: a
//                leave told, a socket registered again), so that a leave
//                held back before for U's sockets elsewhere is not told
// cluster-wide, slot {g}
//   P:{g}:epoch  STRING a random value, set by the first reader that finds
//                none: another one than a node read before says {g}'s keys
//                were lost (redis_graces.go)
//   P:{g}:users  HASH user → "n|activity|status|graceDeadline|disconnectedAt|sockets"
//                (sockets: the user's n socket ids, joined by ","; see userLib)
//   P:{g}:usk:U  SET of U's sockets, in records of releases before 2026-12-02
//   P:{g}:usr:U  ZSET socket → deadline ms: places under the socket cap that
//                nodes of releases before 2026-12-06 reserve (read only)
//   P:{g}:due    ZSET timer → due ms   ("g\tC\tU" grace of U in C, "u\tU"
//                grace of U, "a\tU" away check of U: only for a user handed
//                over by a disconnect; nodes watch their own users in
//                memory, redis_away.go; "t\tC" typing expiry, scheduled by
//                releases before 2026-12-04 and still fired: now the node
//                that recorded a typing start fires its expiry, redis_typing.go)
//   P:{g}:claimed ZSET timer → claim deadline ms  (being fired by a node)
//   P:{g}:off:U  STRING, for offlineToldFor: U's grace ended and its
//                offline status was told (userGrace, endGrace)
//   P:{g}:lease  ZSET node → lease expiry ms
//   P:{g}:holder HASH node → "token|since|last": the instance holding the
//                node id (a random token per process), since when its lease
//                has been renewed without a gap, and its last renewal
//   P:{g}:reap   ZSET "node\ttoken\tlastProofMs" → claim deadline ms
//                (dead instances being cleaned; 0: waiting for a reaper)
// per node instance N/T, slot {n:N}
//   P:{n:N}:T:socks HASH socket → "user\tC1\tC2…"  what it must clean if it dies
// kept by releases before 2026-12-02, still cleared as their entries go
//   P:{c:C}:on   ZSET user → join ms (the members, as m has them)
//   P:{c:C}:sk   ZSET socket → join ms (the sockets, as su has them)
//   P:{c:C}:su   HASH socket → user (the sockets of member records without
//                a socket list)
//   P:{c:C}:tyo  HASH user → socket that typed last (written by releases
//                before 2026-12-07)
//
// Every time in these keys is Redis's own (TIME, in the scripts), the
// typing expiries included, which nodes write with plain commands on their
// estimate of Redis's clock (redisNow: their own plus the skew measured at
// each lease renewal): nodes' clocks are never compared with each other. clockLib reads it; tests
// replace it with a fake clock through the clock argument ("" in
// production).
//
// Keys do not expire: a live node's entries live as long as its lease (no
// periodic re-scoring: idle users cost Redis nothing); a dead node's are
// reaped; a live node removes its own stale ones (reconcile); timers end
// graces and typing.

// clockLib reads Redis's clock in ms, or the fake one a test passes.
// Scripts that call TIME and then write are replicated by their effects
// (Redis ≥ 5's default, 7's only mode).
const clockLib = `
local function clock(fake)
  if fake and fake ~= '' then return tonumber(fake) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// userLeftLib removes a user from a conversation's members (m, and on of
// earlier releases) and its typing (ty, tyo); userLeft is true if it
// removed a typing entry, which its caller announces stopped: whoever
// removes an entry announces it, expired or not (an expired one that is
// still there has not been announced: the expiry check removes what it
// announces).
const userLeftLib = `
local function userLeft(on, m, ty, tyo, user)
  redis.call('HDEL', m, user)
  redis.call('ZREM', on, user)
  if redis.call('ZREM', ty, user) == 0 then return false end
  redis.call('HDEL', tyo, user)
  return true
end
`

// socksLib is what the user and member records share: a last field of
// socket ids joined by ",", absent in a record of a release before
// 2026-12-02 (legacy).
const socksLib = `
-- socksField reads a record's text after its fixed fields into r:
-- r.legacy (nothing) or r.socks; false if it is neither.
local function socksField(r, rest)
  if rest == '' then
    r.legacy = true
  elseif string.sub(rest, 1, 1) == '|' then
    r.socks = string.sub(rest, 2)
  else
    return false
  end
  return true
end
local function socksList(s)
  local l = {}
  for x in string.gmatch(s, '[^,]+') do l[#l + 1] = x end
  return l
end
local function socksIndex(l, sid)
  for i, s in ipairs(l) do
    if s == sid then return i end
  end
  return nil
end
`

// The member record of a user with sockets in the conversation, since
// 2026-12-05: "<since><sockets>", since when the user is a member (ms,
// 7 characters of base64url, most significant first: until the year
// 2109) and its sockets there, joined by ",", each as its tag (memberTag:
// 8 characters, where a socket id has 24; a conversation's roster reads
// every record). A user in its flap grace (no socket left) has the full
// form "n|since|graceDeadline|leftAt|", the form of every record before
// this one: 28 characters where the short one has 15 (Redis 7.0 keeps the
// member hashes of conversations up to 128 members as listpacks, whose
// entries cost their length plus two bytes: 5,000 users in 3 conversations
// of 100, 125 → 79 bytes a user). No record of the full form has no "|";
// none of the short form has one.
// A record written by a release before 2026-12-05 lists socket ids: a
// socket is found under its tag or its id, and a record holds both forms
// until its old sockets go. memberLib parses and writes it. A record
// written by a release before 2026-12-02 has four fields, its sockets in
// the hash su (socket → user), and keeps that form until the user leaves:
// as uset does, mset writes a record back in the form it was read in.
const memberLib = socksLib + `
local b64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
local function mget(m, user)
  local v = redis.call('HGET', m, user)
  if not v then return nil end
  if not string.find(v, '|', 1, true) then
    if #v < 8 then return nil end
    local since = 0
    for i = 1, 7 do
      local d = string.find(b64, string.sub(v, i, i), 1, true)
      if not d then return nil end
      since = since * 64 + d - 1
    end
    local socks = string.sub(v, 8)
    return {n = #socksList(socks), since = since, grace = 0, left = 0, socks = socks}
  end
  local n, since, grace, left, rest = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)(.*)$')
  if not n then return nil end
  local r = {n = tonumber(n), since = tonumber(since), grace = grace, left = left}
  if not socksField(r, rest) then return nil end
  return r
end
-- mshort is since in the short record's 7 characters, or nil if it does
-- not fit.
local function mshort(since)
  if since < 0 or since >= 64 ^ 7 then return nil end
  local s = ''
  for _ = 1, 7 do
    local d = since % 64
    s = string.sub(b64, d + 1, d + 1) .. s
    since = (since - d) / 64
  end
  return s
end
-- mset writes r; the short form only if short (every live instance reads
-- it: readerLevel).
local function mset(m, user, r, short)
  short = short and not r.legacy and r.n > 0 and tonumber(r.grace) == 0 and tonumber(r.left) == 0 and mshort(r.since)
  local v
  if short then
    v = short .. r.socks
  else
    v = r.n .. '|' .. string.format('%.0f', r.since) .. '|' .. r.grace .. '|' .. r.left
    if not r.legacy then v = v .. '|' .. r.socks end
  end
  redis.call('HSET', m, user, v)
end
-- mfind is the position of socket sid (tag: its tag) in r's list (nil:
-- not there; legacy: 0 if su has it for user).
local function mfind(r, su, sid, tag, user)
  if not r then return nil end
  if r.legacy then
    if redis.call('HGET', su, sid) == user then return 0 end
    return nil
  end
  local l = socksList(r.socks)
  return socksIndex(l, tag) or socksIndex(l, sid)
end
local function madd(r, su, sid, tag, user)
  r.n = r.n + 1
  if r.legacy then
    redis.call('HSET', su, sid, user)
  elseif r.socks == '' then
    r.socks = tag
  else
    r.socks = r.socks .. ',' .. tag
  end
end
local function mdel(r, su, sid, tag)
  r.n = r.n - 1
  if r.legacy then
    redis.call('HDEL', su, sid)
    return
  end
  local l = socksList(r.socks)
  local i = socksIndex(l, tag) or socksIndex(l, sid)
  if i then table.remove(l, i) end
  r.socks = table.concat(l, ',')
end
`

// convJoin adds a socket to a conversation, and reads who is typing. The
// roster's members are read by a plain HGETALL of m beside it
// (membersOf): a script that handles a hundred member records costs Redis
// about ten times what the plain commands do (measured: 80 µs against 7).
// KEYS su m ty; ARGV sid user clock tag short(0|1: mset)
// → {first(0|1), now, typing[]}
var convJoin = redis.NewScript(clockLib + memberLib + typingLib + `
local su, m, ty = KEYS[1], KEYS[2], KEYS[3]
local sid, user, now, tag = ARGV[1], ARGV[2], clock(ARGV[3]), ARGV[4]
local short = ARGV[5] == '1'
local first = 0
local r = mget(m, user)
if not mfind(r, su, sid, tag, user) then
  if not r then
    first = 1
    r = {n = 0, since = now, socks = ''}
  end
  madd(r, su, sid, tag, user)
  r.grace, r.left = 0, 0
  mset(m, user, r, short)
end
return {first, now, typingNow(ty, now)}
`)

// rosterStatus reads the user records of a conversation's online members,
// for the roster's online/away split, in the round trip that read the
// roster. The conversation's member records are in another slot and are
// named in ARGV, not KEYS: only on a single Redis server (crossSlot), never
// on a cluster. Members and records come as pairs: a join or leave between
// the roster's read and this script may change the set.
// KEYS users; ARGV mKey → {users[], records[]}
var rosterStatus = redis.NewScript(`
local users = redis.call('HKEYS', ARGV[1])
if #users == 0 then return {{}, {}} end
return {users, redis.call('HMGET', KEYS[1], unpack(users))}
`)

// convTyping reads who is typing in a conversation now, for its roster
// (whose members the caller reads with HGETALL, as convJoin's does).
// KEYS ty; ARGV clock → {now, typing[]}
var convTyping = redis.NewScript(clockLib + typingLib + `
local now = clock(ARGV[1])
return {now, typingNow(KEYS[1], now)}
`)

// typingLib reads who is typing at now (typing expiries after now).
const typingLib = `
local function typingNow(ty, now)
  return redis.call('ZRANGEBYSCORE', ty, '(' .. now, '+inf')
end
`

// convLeave removes a socket from a conversation. mode: "left" (leave now),
// "grace" (the user's leave waits graceMs from atMs), "timeout" or "now"
// (leave now, at atMs). atMs "" is now; a retry of a disconnect that
// failed gives the moment of the disconnect.
// The keys on and sk of releases before 2026-12-02 are cleared here too
// (and on in userLeft), so that what such a release left in Redis goes
// with its sockets.
// A typing entry this removes is announced stopped, expired or not (see
// userLeftLib). The user's entry goes with the socket, although the user
// stays, when the socket typed last: typedMs is the expiry this node's
// start through the socket wrote (redis_typing.go, typedBy; "" if the
// socket is not the user's typist here), and the entry goes if it has not
// been moved later since (a start of another of the user's sockets on
// another node did that: that typing goes on). A reaper does not know who
// typed on the dead node: with adopt "1" it is given the expiry of the
// user's entry when the user stays (typingMs), to fire it (typing.adopt).
// A node of a release before 2026-12-07 named the typist in tyo, which
// is still read.
// KEYS on sk su m ty tyo; ARGV sid user clock mode graceMs atMs tag
// short(0|1: mset) typedMs adopt(0|1) → {typingStopped(0|1), left(0|1),
// at, typingMs, the expiry of the entry it removed with the socket,
// noRecord(0|1): the user has no member record there at all (see
// removeFrom's lost)}
var convLeave = redis.NewScript(clockLib + memberLib + userLeftLib + `
local on, sk, su, m, ty, tyo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local sid, user, now, mode = ARGV[1], ARGV[2], clock(ARGV[3]), ARGV[4]
local at = tonumber(ARGV[6]) or now
local deadline = at + tonumber(ARGV[5])
local tag, short = ARGV[7], ARGV[8] == '1'
local typed, adopt = tonumber(ARGV[9]), ARGV[10] == '1'
local r = mget(m, user)
if not mfind(r, su, sid, tag, user) then
  if not r then
    redis.call('HDEL', su, sid) -- a legacy entry without its record
    return {0, 0, 0, 0, 0, 1}
  end
  return {0, 0, 0, 0, 0, 0}
end
mdel(r, su, sid, tag)
redis.call('ZREM', sk, sid)
local stopped, removed = 0, 0
local cur = tonumber(redis.call('ZSCORE', ty, user))
if cur and ((typed and cur <= typed) or redis.call('HGET', tyo, user) == sid) then
  redis.call('HDEL', tyo, user)
  redis.call('ZREM', ty, user)
  stopped, removed, cur = 1, cur, nil
end
local keep = 0
if adopt and cur then keep = cur end
if r.n > 0 then
  r.grace, r.left = 0, 0
  mset(m, user, r, short)
  return {stopped, 0, 0, keep, removed}
end
if mode == 'grace' then
  r.grace, r.left = deadline, at
  mset(m, user, r, short)
  return {stopped, 0, 0, keep, removed}
end
if userLeft(on, m, ty, tyo, user) then stopped, removed = 1, cur or 0 end
return {stopped, 1, at, 0, removed}
`)

// convGrace ends a user's flap grace in a conversation if it is due; if it
// is not due yet (the timer's clock, another Redis server's, ran ahead),
// it says how long to wait. With early "1" it ends a grace that runs,
// due or not (EndGraces).
// KEYS on m ty tyo; ARGV user clock [early] → {left(0|1), leftAt,
// typingStopped, waitMs, noRecord(0|1): the user has no member record
// there (runGraces)}
var convGrace = redis.NewScript(clockLib + memberLib + userLeftLib + `
local on, m, ty, tyo = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user, now = ARGV[1], clock(ARGV[2])
local r = mget(m, user)
if not r then return {0, 0, 0, 0, 1} end
local deadline = tonumber(r.grace)
if r.n > 0 or deadline == 0 then return {0, 0, 0, 0} end
if deadline > now and ARGV[3] ~= '1' then return {0, 0, 0, deadline - now} end
local stopped = 0
if userLeft(on, m, ty, tyo, user) then stopped = 1 end
return {1, tonumber(r.left), stopped, 0}
`)

// typingTakeBack removes user's typing entry if it still expires at the
// score a start wrote (its socket left while the start was written: the
// start is taken back, not one of another socket's that moved it since).
// KEYS ty; ARGV user score → 1 if removed
var typingTakeBack = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
`)

// typingExpire removes expired typing entries, for the expiry timers
// releases before 2026-12-04 put in the shared due set (a node's own
// expiries are plain commands now: runTyping). KEYS ty tyo; ARGV clock → {users[], ms to the next expiry, or 0}
var typingExpire = redis.NewScript(clockLib + `
local ty, tyo = KEYS[1], KEYS[2]
local now = clock(ARGV[1])
local users = redis.call('ZRANGEBYSCORE', ty, '-inf', now)
for _, u in ipairs(users) do
  redis.call('ZREM', ty, u)
  redis.call('HDEL', tyo, u)
end
local nxt = redis.call('ZRANGE', ty, 0, 0, 'WITHSCORES')
local n = 0
if #nxt > 0 then n = math.max(1, tonumber(nxt[2]) - now) end
return {users, n}
`)

// The user record: "n|activity|status|graceDeadline|disconnectedAt|sockets",
// status one of on, away, off; sockets the user's n socket ids, joined by
// ",". userLib parses and writes it. A record written by a release before
// 2026-12-02 has no sixth field: its sockets are in the set P:{g}:usk:U
// (a Redis 7.0 set of strings is a hashtable: 216 bytes for one socket,
// against 25 here). Such a record keeps that form until a connect or a
// disconnect of the user (the scripts given usk) moves the set into it
// (usocks); uset writes a record back in the form it was read in.
const userLib = socksLib + `
local function uget(h, user)
  local v = redis.call('HGET', h, user)
  if not v then return nil end
  local n, act, st, grace, disc, rest = string.match(v, '^(%d+)|(%d+)|(%a+)|(%d+)|(%d+)(.*)$')
  if not n then return nil end
  local u = {n = tonumber(n), act = tonumber(act), st = st, grace = tonumber(grace), disc = tonumber(disc)}
  if not socksField(u, rest) then return nil end
  return u
end
local function uset(h, user, u)
  local v = u.n .. '|' .. u.act .. '|' .. u.st .. '|' .. u.grace .. '|' .. u.disc
  if not u.legacy then v = v .. '|' .. u.socks end
  redis.call('HSET', h, user, v)
end
-- usocklist is the list of u's sockets (u may be nil), read only.
local function usocklist(u, usk)
  if not u then return {} end
  if u.legacy then return redis.call('SMEMBERS', usk) end
  return socksList(u.socks)
end
-- usocks is the list of u's sockets; a legacy record's set moves into u
-- (written by the caller's uset, with usave).
local function usocks(u, usk)
  local l = usocklist(u, usk)
  if u.legacy then
    u.legacy = nil
    redis.call('DEL', usk)
  end
  return l
end
local function usave(u, l)
  u.socks = table.concat(l, ',')
  u.n = #l
end
`

// userConnect counts a new connection of a user: its socket joins the
// user's socket list (so that counting is idempotent per socket). The
// node watches the user for away (redis_away.go). With max > 0 a socket
// not in the list yet is refused if the user has max sockets already:
// those of the list, and the places that nodes of a release before
// 2026-12-06 reserve for their handshakes (usr, a sorted set by deadline,
// which they end at their Connect); nothing is written then.
//
// A connect is activity. A socket registered again (a resync, after Redis
// lost its data or the node was reaped) is not: it gives instead how long
// ago (ageMs) its node last saw the user active, and awayAfterMs. A user
// with no record, or offline, gets that activity, and is away if it is
// awayAfterMs old; an away user whose activity here is more recent comes
// back online; an online user stays so (another node may know of activity
// this one did not see), with the later of the two activities.
// KEYS users due usk usr; ARGV user sid clock max [ageMs awayAfterMs] → 1
// if the user came online, 2 if they came back away, 0 if their status
// did not change, -1 refused
var userConnect = redis.NewScript(clockLib + userLib + `
local h, due, usk, usr = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user, sid, now, max = ARGV[1], ARGV[2], clock(ARGV[3]), tonumber(ARGV[4]) or 0
local age = tonumber(ARGV[5])
local u = uget(h, user)
if max > 0 then
  local l = usocklist(u, usk)
  if not socksIndex(l, sid) then
    local n = #l
    for _, s in ipairs(redis.call('ZRANGEBYSCORE', usr, '(' .. now, '+inf')) do
      if s ~= sid and not socksIndex(l, s) then n = n + 1 end
    end
    if n >= max then return -1 end
  end
end
u = u or {n = 0, act = now, st = 'off', grace = 0, disc = 0, socks = ''}
local l = usocks(u, usk)
if not socksIndex(l, sid) then l[#l + 1] = sid end
usave(u, l)
u.grace = 0
local came = 0
if age then
  local act = now - age
  if u.st == 'off' or u.act < act then u.act = act end
  if u.st ~= 'on' then
    local st = 'on'
    if u.act + tonumber(ARGV[6]) <= now then st = 'away' end
    if u.st ~= st then
      u.st = st
      came = (st == 'on') and 1 or 2
    end
  end
else
  u.act = now
  if u.st ~= 'on' then u.st = 'on'; came = 1 end
end
uset(h, user, u)
redis.call('ZREM', due, 'u\t' .. user)
return came
`)

// userDisconnect uncounts a connection (a socket not counted is a no-op).
// mode grace: offline waits graceMs from atMs; timeout or now: offline
// now. atMs ("" is now) is the moment the socket was last there: its
// disconnect (a retry of one that failed gives that moment), or a dead
// node's last proof of life. The record keeps the latest of those moments
// of the user's sockets (disc): the lastSeen of a user whose last socket
// was on a dead node is the later of that node's proof and the moment
// another socket of the user closed meanwhile. An online user with
// sockets left gets an away timer in the due set: the node of this socket
// may have been the one watching the user (redis_away.go); it fires
// awayAfterMs after the recorded activity (the caller adds the slack,
// awaySlack, to AwayAfter). actMs (optional) is the user's last activity
// that the socket's node saw, when it had no other socket of the user: it
// may not have been recorded yet (redis_activity.go), and an online user's
// recorded activity moves on to it.
// KEYS users due usk; ARGV user sid clock mode graceMs atMs awayAfterMs
// [actMs] → {offline(0|1), lastSeen, noRecord(0|1): the user has no record
// at all (see removeFrom's lost), the user's other sockets (anywhere)}
var userDisconnect = redis.NewScript(clockLib + userLib + `
local h, due, usk = KEYS[1], KEYS[2], KEYS[3]
local user, sid, now, mode = ARGV[1], ARGV[2], clock(ARGV[3]), ARGV[4]
local at = tonumber(ARGV[6]) or now
local deadline = at + tonumber(ARGV[5])
local u = uget(h, user)
if not u then
  redis.call('SREM', usk, sid)
  return {0, 0, 1, 0}
end
local moved = u.legacy
local l = usocks(u, usk)
local i = socksIndex(l, sid)
if not i then
  if moved then usave(u, l); uset(h, user, u) end
  return {0, 0, 0, #l}
end
table.remove(l, i)
usave(u, l)
if u.disc < at then u.disc = at end
local act = tonumber(ARGV[8])
if act and u.st == 'on' and u.act < act then u.act = act end
if u.n > 0 then
  uset(h, user, u)
  if u.st == 'on' then redis.call('ZADD', due, u.act + tonumber(ARGV[7]), 'a\t' .. user) end
  return {0, 0, 0, u.n}
end
if mode == 'grace' then
  u.grace = deadline
  uset(h, user, u)
  redis.call('ZADD', due, deadline, 'u\t' .. user)
  return {0, 0, 0, 0}
end
redis.call('HDEL', h, user)
redis.call('ZREM', due, 'u\t' .. user, 'a\t' .. user)
return {1, u.disc, 0, 0}
`)

// userGrace ends a user's flap grace if it is due, or says how long to wait.
// It notes the offline status it tells in off (for offMs, if given): a
// grace a node ends itself after {g}'s loss (endGrace) is told once.
// KEYS users due [off]; ARGV user clock [offMs] → {offline(0|1),
// disconnectedAt, waitMs}
var userGrace = redis.NewScript(clockLib + userLib + `
local h, due = KEYS[1], KEYS[2]
local user, now = ARGV[1], clock(ARGV[2])
local u = uget(h, user)
if not u or u.n > 0 or u.grace == 0 then return {0, 0, 0} end
if u.grace > now then return {0, 0, u.grace - now} end
redis.call('HDEL', h, user)
redis.call('ZREM', due, 'a\t' .. user)
if KEYS[3] then redis.call('SET', KEYS[3], '1', 'PX', ARGV[3]) end
return {1, u.disc, 0}
`)

// userActivity records the activity of one or more users (the recording
// node watches them for away, redis_away.go), at one clock reading: a
// batch of records is one script call, not one per user, as a script
// call's fixed cost in Redis (about 8 µs on Redis 7.0, with TIME and the
// library's definitions 12) is several times that of a user's record. A
// user without a socket left (a record sent after the last one closed:
// recordLater) is not touched. Each activity was agoMs before the clock
// reading (a record the node deferred, runAway; 0 for the others): it
// never moves the recorded activity back, and brings an away user back
// online only if it is within awayAfter (a deferred record that lands
// after another node turned the user away brings them back; one older
// than that does not). KEYS users; ARGV clock awayAfter (user agoMs)… →
// for each user 1 if it was away and came back online, else 0
var userActivity = redis.NewScript(clockLib + userLib + `
local h = KEYS[1]
local now, away = clock(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local ago = tonumber(ARGV[i + 1])
  local user, t = ARGV[i], now - ago
  local u = uget(h, user)
  local back = 0
  if u and u.n > 0 then
    if u.st == 'away' and t + away > now then u.st = 'on'; back = 1 end
    -- every later activity is written: a node sets its away check from
    -- the records it sends, so another node's check must find each one
    -- (skipping those less than 1 s after the last turned users away up
    -- to 1 s early); a node sends at most one per activityEvery
    if back == 1 or t > u.act then
      u.act = math.max(u.act, t)
      uset(h, user, u)
    end
  end
  out[#out + 1] = back
end
return out
`)

// userAway turns a connected, idle user away, or says how long to wait.
// KEYS users; ARGV user clock awayAfter → {turned(0|1), waitMs}
var userAway = redis.NewScript(clockLib + userLib + `
local h = KEYS[1]
local user, now, away = ARGV[1], clock(ARGV[2]), tonumber(ARGV[3])
local u = uget(h, user)
if not u or u.n == 0 or u.st ~= 'on' then return {0, 0} end
if u.act + away > now then return {0, u.act + away - now} end
u.st = 'away'
uset(h, user, u)
return {1, 0}
`)

// dueIn schedules a timer delayMs from now. lt: only if earlier than an
// existing one. KEYS due; ARGV member delayMs lt(0|1) clock
var dueIn = redis.NewScript(clockLib + `
local at = clock(ARGV[4]) + tonumber(ARGV[2])
if ARGV[3] == '1' then return redis.call('ZADD', KEYS[1], 'LT', at, ARGV[1]) end
return redis.call('ZADD', KEYS[1], at, ARGV[1])
`)

// claimDue claims due timers for the caller: each moves from the due set
// to the claimed set until claimMs from now; claims that ran out (their
// node died before acknowledging them) are claimed again. A timer
// scheduled anew while claimed is simply due again.
// KEYS due claimed; ARGV clock limit claimMs → {claimScore, members…}
var claimDue = redis.NewScript(clockLib + `
local due, claimed = KEYS[1], KEYS[2]
local now, limit = clock(ARGV[1]), tonumber(ARGV[2])
local at = now + tonumber(ARGV[3])
local out = {at}
local seen = {}
for _, it in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', due, it)
  redis.call('ZADD', claimed, at, it)
  seen[it] = true
  table.insert(out, it)
end
for _, it in ipairs(redis.call('ZRANGEBYSCORE', claimed, '-inf', now, 'LIMIT', 0, limit)) do
  if not seen[it] then
    redis.call('ZADD', claimed, at, it)
    table.insert(out, it)
  end
end
return out
`)

// ackDue acknowledges fired timers: each leaves the claimed set (unless
// another node claimed it meanwhile), and one with more to do is due again
// waitMs from now (or earlier, if it was scheduled anew).
// KEYS due claimed; ARGV claimScore clock member waitMs [member waitMs …]
var ackDue = redis.NewScript(clockLib + `
local due, claimed = KEYS[1], KEYS[2]
local claim = tonumber(ARGV[1])
local now = clock(ARGV[2])
for i = 3, #ARGV, 2 do
  local m, wait = ARGV[i], tonumber(ARGV[i + 1])
  local cur = redis.call('ZSCORE', claimed, m)
  if cur and tonumber(cur) == claim then redis.call('ZREM', claimed, m) end
  if wait > 0 then redis.call('ZADD', due, 'LT', now + wait, m) end
end
return 1
`)

// holderLib reads and writes the holder record "token|since|last".
const holderLib = `
local function hget(holder, node)
  local v = redis.call('HGET', holder, node)
  if not v then return nil end
  local tok, since, last = string.match(v, '^([^|]*)|(%d+)|(%d+)$')
  if not tok then return nil end
  return {tok = tok, since = tonumber(since), last = tonumber(last)}
end
local function hset(holder, node, tok, since, last)
  redis.call('HSET', holder, node, tok .. '|' .. since .. '|' .. last)
end
`

// nodeLease claims or renews a node id's lease for the instance token.
// KEYS lease holder reap tentative; ARGV node token leaseMs clock prior
// probationMs → {code, n, now, level}: level the lowest reader level
// among the holders' tokens (readerLevel; 0 for a token without one); code
// 1 renewed without a gap since n; 2 renewed after a lapse nobody acted on
// (entries intact; the gap-free period restarts); 3 claimed afresh (first
// start, or after a reap or a loss of data: the caller registers its
// sockets again); -1 held by a live instance until n; -2 this instance is
// being reaped: try again once the reap is done.
//
// A claim with probationMs > 0 is tentative for that long (the tentative
// key names its token): a node that started while Redis was unreachable
// claims at its first connection, and if Redis lost its data meanwhile,
// the id may be a running node's whose lease went with the data. That
// node, renewing with prior = 1 (it held the id), takes the id back from a
// tentative holder, queues it to be reaped as a successor queues a dead
// instance, and registers its sockets again (code 3); the tentative holder
// finds the id taken at its next renewal. Anyone else meets -1 as before.
var nodeLease = redis.NewScript(clockLib + holderLib + `
local lease, holder, reap, tent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local node, token, len = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = clock(ARGV[4])
local prior, probation = ARGV[5] == '1', tonumber(ARGV[6])
local exp = tonumber(redis.call('ZSCORE', lease, node) or '0')
local h = hget(holder, node)
-- the lowest reader level among the holders (this instance's included)
local function level()
  local lv = nil
  for _, v in ipairs(redis.call('HVALS', holder)) do
    local l = tonumber(string.match(v, '^L(%d+)-') or '0')
    if not lv or l < lv then lv = l end
  end
  return lv or 0
end
if h and h.tok == token then
  local code, since = 1, h.since
  if exp <= now then code, since = 2, now end
  hset(holder, node, token, since, now)
  redis.call('ZADD', lease, now + len, node)
  return {code, since, now, level()}
end
if h then
  if exp > now and not (prior and redis.call('GET', tent) == h.tok) then return {-1, exp, now, 0} end
  -- a previous instance under this id died, or claimed it tentatively from
  -- this one: queue it for a reaper
  redis.call('ZREM', lease, node)
  redis.call('DEL', tent)
  redis.call('ZADD', reap, 0, node .. '\t' .. h.tok .. '\t' .. h.last)
else
  local mine = node .. '\t' .. token .. '\t'
  for _, item in ipairs(redis.call('ZRANGE', reap, 0, -1)) do
    if string.sub(item, 1, #mine) == mine then return {-2, 0, now, 0} end
  end
end
hset(holder, node, token, now, now)
redis.call('ZADD', lease, now + len, node)
if probation > 0 then redis.call('SET', tent, token, 'PX', probation) end
return {3, now, now, level()}
`)

// nodeRelease gives a node id up (a clean shutdown).
// KEYS lease holder; ARGV node token → 1 if released
var nodeRelease = redis.NewScript(holderLib + `
local h = hget(KEYS[2], ARGV[1])
if not h or h.tok ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
`)

// claimDead claims dead instances for the caller to reap: those whose
// lease lapsed, those queued by their successor, and reaps abandoned by a
// reaper that died (claim deadline passed). Only an instance whose own
// lease has been renewed without a gap for a full lease period reaps: after
// a stall of Redis every lease lapses, and every node must have had the
// time to renew its own first.
// KEYS lease holder reap; ARGV node token leaseMs claimMs clock
// → {claimDeadline, "node\ttoken\tlastProofMs", …}
var claimDead = redis.NewScript(clockLib + holderLib + `
local lease, holder, reap = KEYS[1], KEYS[2], KEYS[3]
local node, token, len, claim = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = clock(ARGV[5])
local me = hget(holder, node)
local exp = tonumber(redis.call('ZSCORE', lease, node) or '0')
if not me or me.tok ~= token or exp <= now or now - me.since < len then return {0} end
local out = {now + claim}
local dead = redis.call('ZRANGEBYSCORE', lease, '-inf', now)
for _, n in ipairs(dead) do
  redis.call('ZREM', lease, n)
  local h = hget(holder, n)
  if h then
    redis.call('HDEL', holder, n)
    local item = n .. '\t' .. h.tok .. '\t' .. h.last
    redis.call('ZADD', reap, now + claim, item)
    table.insert(out, item)
  end
end
for _, item in ipairs(redis.call('ZRANGEBYSCORE', reap, '-inf', now)) do
  redis.call('ZADD', reap, now + claim, item)
  table.insert(out, item)
end
return out
`)

// reapHeld extends the caller's claim on a reap; 0 if the claim was lost
// (another reaper took it over, or it is done).
// KEYS reap; ARGV item deadline claimMs clock → new deadline or 0
var reapHeld = redis.NewScript(clockLib + `
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
local d = clock(ARGV[4]) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], d, ARGV[1])
return d
`)
