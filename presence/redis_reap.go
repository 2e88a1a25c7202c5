package presence

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/timestamp"
)

// reapDead cleans up after dead node instances; exactly one node claims
// each (claimDead, which also refuses a caller whose own lease is not
// established).
func (e *RedisEngine) reapDead(ctx context.Context, now time.Time) error {
	raw, err := claimDead.Run(ctx, e.rdb, []string{e.kLease, e.kHolder, e.kReap}, e.cfg.NodeID, e.token,
		e.cfg.LeaseTTL.Milliseconds(), reapClaim.Milliseconds(), e.clk()).Slice()
	if err != nil {
		return unavailable("claim dead nodes", err)
	}
	if len(raw) < 2 {
		return nil
	}
	deadline := toInt(raw[0])
	for _, x := range raw[1:] {
		item, _ := x.(string)
		f := strings.Split(item, "\t")
		if len(f) == 3 {
			lastProof, _ := strconv.ParseInt(f[2], 10, 64)
			done, err := e.reapNode(ctx, item, deadline, f[0], f[1], timestamp.FromMillis(lastProof), now)
			if err != nil {
				return err
			}
			if !done {
				continue // another reaper took it over
			}
			e.reaped.Inc()
			e.log.Info("reaped dead node", "dead_node", f[0], "last_lease", timestamp.FromMillis(lastProof))
		}
		if err := e.rdb.ZRem(ctx, e.kReap, item).Err(); err != nil {
			return unavailable("reap done", err)
		}
	}
	return nil
}

// reapNode removes every socket a dead node instance registered, as timed
// out at lastProof, a group of registry buckets at a time; before each
// group it extends its claim on the reap, and stops if it lost it (done
// false). Last, the registry's bucket count goes.
func (e *RedisEngine) reapNode(ctx context.Context, item string, deadline int64, node, token string, lastProof, now time.Time) (done bool, err error) {
	base := e.registryKey(node, token)
	buckets, err := e.regBucketCount(ctx, base)
	if err != nil {
		return false, unavailable("read registry", err)
	}
	err = e.scanRegistry(ctx, registryKeys(base, buckets), func(lines []regLine) error {
		deadline, err = reapHeld.Run(ctx, e.rdb, []string{e.kReap}, item, deadline, reapClaim.Milliseconds(), e.clk()).Int64()
		if err != nil {
			return unavailable("reap claim", err)
		}
		if deadline == 0 {
			return errReapLost
		}
		var all batch
		for _, l := range lines {
			f := strings.Split(l.line, "\t")
			s := &rSocket{id: l.sid, user: f[0], convs: setOf(f[1:])}
			b, err := e.removeFrom(ctx, l.key, s, now, "timeout", lastProof, true)
			all = append(all, b...)
			if err != nil {
				e.emit(ctx, all)
				return err
			}
		}
		e.emit(ctx, all)
		return nil
	})
	switch {
	case errors.Is(err, errReapLost):
		return false, nil
	case err != nil && !errors.Is(err, ErrUnavailable):
		return false, unavailable("read registry", err)
	case err != nil:
		return false, err
	}
	if err := e.rdb.Del(ctx, regCountKey(base)).Err(); err != nil {
		return false, unavailable("reap done", err)
	}
	return true, nil
}

// errReapLost: another node took a reap over.
var errReapLost = errors.New("presence: reap taken over")
