package adapter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/adapter"
)

// A server-side event of the program's own (Config.OwnEvents) waits for
// the answers of its own nodes (Config.Peers) alone: another Socket.IO
// server sharing the cluster, a Node one, has no listener for it and never
// answers. Before, one such server made every call wait out
// RequestsTimeout (presenced's privacy, contacts and membership changes
// took 5 s: a black-box interop audit, 2026-12-07). Any other event still
// waits for every server.
func TestOwnEventsAnsweredByPeersOnly(t *testing.T) {
	rdb := needRedis(t)
	prefix := uniquePrefix(t)
	cfg := adapter.Config{Prefix: prefix, RequestsTimeout: 2 * time.Second, OwnEvents: "own:",
		Peers: func(context.Context) (int64, error) { return 2, nil }}
	n1 := startGoNode(t, "n1", rdb, cfg)
	n2 := startGoNode(t, "n2", rdb, cfg)
	_ = n2.io.Of("/", nil).On("own:ping", func(args ...any) {
		if ack, ok := args[len(args)-1].(socket.Ack); ok {
			ack([]any{"pong"}, nil)
		}
	})
	// a server of another program: subscribed to the request channel
	// (counted by PUBSUB NUMSUB), answering nothing
	other := rdb.Subscribe(context.Background(), prefix+"-request#/#")
	t.Cleanup(func() { _ = other.Close() })
	if _, err := other.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitCluster(t, n1, n2)
	eventually(t, 5*time.Second, "three servers counted", func() bool {
		c, err := n1.adapter().ServerCountContext(context.Background())
		return err == nil && c == 3
	})
	call := func(ev string) ([]any, time.Duration, error) {
		type result struct {
			args []any
			err  error
		}
		res := make(chan result, 1)
		start := time.Now()
		_ = n1.io.ServerSideEmitWithAck(ev)(func(args []any, err error) { res <- result{args, err} })
		r := <-res
		return r.args, time.Since(start), r.err
	}
	if args, took, err := call("own:ping"); err != nil || len(args) != 1 || args[0] != "pong" || took > time.Second {
		t.Errorf("own event: %v, %v after %v; want n2's answer alone, at once", args, err, took)
	}
	if _, took, err := call("ping-sse"); err == nil || !strings.Contains(err.Error(), "out of 2") {
		t.Errorf("another event: %v after %v; want a timeout waiting for both other servers", err, took)
	}
}
