// Package redisepoch tells whether Redis lost a group of keys: an epoch key
// among them holds a random value, set by the first reader to find none.
// A reader that remembers the value it read last and reads another knows
// the keys were lost meanwhile (a restart without persistence, a Redis
// Cluster master without replica that came back empty), or deleted.
package redisepoch

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/redis/go-redis/v9"
)

// Read returns the epoch at key, setting a new random one if there is none:
// SETNX and GET in one round trip (SET NX GET would be one command, but
// only from Redis 7.0 on; presenced serves 6.2).
func Read(ctx context.Context, c redis.Cmdable, key string) (string, error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	cand := hex.EncodeToString(id[:]) // a new one at each read: a reader's own last one would look unchanged
	pipe := c.Pipeline()
	pipe.SetNX(ctx, key, cand, 0)
	get := pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", err
	}
	return get.Val(), nil
}
