package presence

import (
	"context"
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
// out at lastProof, a chunk at a time; before each chunk it extends its
// claim on the reap, and stops if it lost it (done false).
func (e *RedisEngine) reapNode(ctx context.Context, item string, deadline int64, node, token string, lastProof, now time.Time) (done bool, err error) {
	regKey := e.registryKey(node, token)
	for {
		kv, _, err := e.rdb.HScan(ctx, regKey, 0, "", 500).Result()
		if err != nil {
			return false, unavailable("read registry", err)
		}
		if len(kv) == 0 {
			return true, nil
		}
		deadline, err = reapHeld.Run(ctx, e.rdb, []string{e.kReap}, item, deadline, reapClaim.Milliseconds(), e.clk()).Int64()
		if err != nil {
			return false, unavailable("reap claim", err)
		}
		if deadline == 0 {
			return false, nil
		}
		var all batch
		for i := 0; i+1 < len(kv); i += 2 {
			f := strings.Split(kv[i+1], "\t")
			s := &rSocket{id: kv[i], user: f[0], convs: map[string]struct{}{}}
			for _, c := range f[1:] {
				s.convs[c] = struct{}{}
			}
			b, err := e.removeFrom(ctx, regKey, s, now, "timeout", lastProof)
			all = append(all, b...)
			if err != nil {
				e.emit(ctx, all)
				return false, err
			}
		}
		e.emit(ctx, all)
	}
}
