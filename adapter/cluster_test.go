package adapter_test

import (
	"context"
	"testing"

	"github.com/presenced/presenced/internal/redistest"
)

// TestRedisCluster runs the Go-to-Go suite over a Redis Cluster: sharded
// mode (shard channels routed to the node owning their slot) and classic.
func TestRedisCluster(t *testing.T) {
	cc := redistest.Cluster(t)
	// The rooms of the suite live on different nodes.
	masters := map[string]bool{}
	for _, room := range []string{"r1", "r2", "user:a", "user:b", "user:c", "user:d"} {
		node, err := cc.MasterForKey(context.Background(), "x#/#"+room+"#")
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	t.Logf("room channels spread over %d masters", len(masters))
	inModes(t, func(t *testing.T, sharded bool) { testGoGo(t, cc, sharded) })
}
