package presence

import (
	"context"
	"time"
)

// SetRedisClock replaces Redis's clock, as the engine's scripts read it,
// with a test's fake clock.
func SetRedisClock(e *RedisEngine, now func() time.Time) { e.fakeClock = now }

// OneSlotPerScript makes the engine keep each script to one slot, as it
// does on a Redis Cluster.
func OneSlotPerScript(e *RedisEngine) { e.crossSlot = false }

// ClaimDueTimers claims the due timers as a tick does, and fires none: a
// node that dies right after its claim.
func ClaimDueTimers(ctx context.Context, e *RedisEngine) ([]string, error) {
	raw, err := claimDue.Run(ctx, e.rdb, []string{e.kDue, e.kClaimed}, e.clk(), 200, timerClaim.Milliseconds()).Slice()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, x := range raw[1:] {
		out = append(out, x.(string))
	}
	return out, nil
}

// MemberTag is how member records list a socket.
func MemberTag(sid string) string { return memberTag(sid) }

// ShortMember is the member record "<since><sockets>" (memberLib) of a
// user with sockets socks (joined by ",") since the given ms: written
// here, independently of the scripts, to check what they write.
func ShortMember(since int64, socks string) string {
	var b [7]byte
	for i := 6; i >= 0; i-- {
		b[i] = memberB64[since%64]
		since /= 64
	}
	return string(b[:]) + socks
}

// RegistryBucketKey is the key of the bucket of a node instance's registry
// (base: "<prefix>:{n:<node>}:<token>:socks") that holds socket sid, when
// the registry has the given number of buckets.
func RegistryBucketKey(base, sid string, buckets int) string {
	return regBucketKey(base, regHash(sid, buckets))
}

// RegMinBuckets and RegPerBucket: a registry's first bucket count, and the
// sockets a bucket holds on average before the count doubles.
const RegMinBuckets, RegPerBucket = regMinBuckets, regPerBucket

// SetMembershipClock sets the clock of a CachedMembership.
func SetMembershipClock(c *CachedMembership, now func() time.Time) { c.now = now }
