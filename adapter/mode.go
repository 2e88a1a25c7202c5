package adapter

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Nodes in classic and sharded Pub/Sub mode on one prefix do not hear each
// other: a node started with the other mode than the rest shares their
// Redis data (rosters, leases, the socket cap) and never gets their room
// events, nor they its (a black-box audit, 2026-12-08: one node of three
// with a different PRESENCE_REDIS_SHARDED, silent). Each node therefore
// keeps a short-lived key naming its mode, its beacon, and looks for the
// other mode's: OtherMode at start, and the Builder every modeEvery,
// logging an error while one is found.
const (
	modeEvery = 2 * time.Second
	modeTTL   = 3 * modeEvery
	// modeLogEvery bounds the error's repeats while the mismatch lasts.
	modeLogEvery = time.Minute
)

// ModeName is the name of a Pub/Sub mode: "sharded" or "classic" (as in
// its beacon's key).
func ModeName(sharded bool) string {
	if sharded {
		return "sharded"
	}
	return "classic"
}

// modeKey is the beacon key of the nodes in a mode on prefix.
func modeKey(prefix string, sharded bool) string {
	return prefix + "#pubsub-mode#" + ModeName(sharded)
}

// OtherMode reports a node of the cluster on prefix that uses the other
// Pub/Sub mode than sharded, live within the last few seconds: the name
// its beacon holds (its Config.Name, or "?"), or "" if there is none.
func OtherMode(ctx context.Context, client redis.UniversalClient, prefix string, sharded bool) (string, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	name, err := client.Get(ctx, modeKey(prefix, !sharded)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if name == "" {
		name = "?"
	}
	return name, nil
}

// watchMode keeps this node's beacon and logs an error while a node of
// the other mode is found. It ends with the Builder.
func (b *Builder) watchMode() {
	t := time.NewTicker(modeEvery)
	defer t.Stop()
	var logged time.Time
	for {
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.PublishTimeout)
		name := b.cfg.Name
		if name == "" {
			name = "?"
		}
		// the beacon kept and the other mode's read in one round trip
		// (whose error is redis.Nil when the other mode has no beacon)
		var get *redis.StringCmd
		_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, modeKey(b.cfg.Prefix, b.cfg.Sharded), name, modeTTL)
			get = p.Get(ctx, modeKey(b.cfg.Prefix, !b.cfg.Sharded))
			return nil
		})
		cancel()
		if other := get.Val(); err == nil && time.Since(logged) >= modeLogEvery {
			logged = time.Now()
			b.log.Error("a node of this cluster uses the other pub/sub mode: room events do not cross between it and this node; give every node the same PRESENCE_REDIS_SHARDED",
				"this_node_mode", ModeName(b.cfg.Sharded), "other_node", other, "other_mode", ModeName(!b.cfg.Sharded), "prefix", b.cfg.Prefix)
		}
		// (a failure is Redis's, which the publishes and the presence
		// engine report; the beacon is kept again at the next tick)
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}
