package presence

import (
	"context"

	"github.com/presenced/presenced/timestamp"
	"github.com/redis/go-redis/v9"
)

// The RedisEngine is also the cluster's Admission: a user's sockets are
// the socket list of its record (kept by the connect and disconnect
// scripts) plus the reservations of handshakes not connected yet, a sorted
// set by deadline in the same slot ({g}), counted and extended in one
// script.

var _ Admission = (*RedisEngine)(nil)

// userReserved is the key of a user's reservations (slot {g}).
func (e *RedisEngine) userReserved(user string) string {
	return e.rcfg.Prefix + ":{g}:usr:" + user
}

// admitScript reserves a place for a socket unless the user is full.
// Reservations of sockets already in the socket list are not counted twice
// (between Connect and Release a socket is in both).
// KEYS users usk usr; ARGV user sid now ttlMs max → 1 admitted, 0 full
var admitScript = redis.NewScript(userLib + `
local h, usk, usr = KEYS[1], KEYS[2], KEYS[3]
local user, sid, now, ttl, max = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local l = usocklist(uget(h, user), usk)
if socksIndex(l, sid) then return 1 end
redis.call('ZREMRANGEBYSCORE', usr, '-inf', now)
if redis.call('ZSCORE', usr, sid) then return 1 end
local n = #l
for _, s in ipairs(redis.call('ZRANGE', usr, 0, -1)) do
  if not socksIndex(l, s) then n = n + 1 end
end
if n >= max then return 0 end
redis.call('ZADD', usr, now + ttl, sid)
redis.call('PEXPIRE', usr, ttl)
return 1
`)

// Admit implements Admission.
func (e *RedisEngine) Admit(ctx context.Context, user, sid string, max int) (bool, error) {
	if err := redisSocketID(sid); err != nil {
		return false, err
	}
	now := e.cfg.Now()
	pipe := e.rdb.Pipeline()
	admit := admitScript.Run(ctx, pipe, []string{e.kUsers, e.userSockets(user), e.userReserved(user)},
		user, sid, timestamp.Millis(now), ReservationTTL.Milliseconds(), max)
	if err := e.exec(ctx, pipe); err != nil {
		return false, unavailable("admit", err)
	}
	n, _ := admit.Int()
	return n == 1, nil
}

// Release implements Admission.
func (e *RedisEngine) Release(ctx context.Context, user, sid string) error {
	pipe := e.rdb.Pipeline()
	pipe.ZRem(ctx, e.userReserved(user), sid)
	return unavailable("release", e.exec(ctx, pipe))
}
