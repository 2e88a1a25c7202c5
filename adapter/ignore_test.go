package adapter_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/logbuf"
)

// Malformed messages on the adapter's channels (a backend writing what no
// node can read) are dropped with a warning: the first at once, then one
// per 10 s with their count. They were logged at debug level only.
func TestMalformedMessagesWarned(t *testing.T) {
	rdb := needRedis(t)
	prefix := uniquePrefix(t)
	var logs logbuf.Buffer
	n := startGoNode(t, "n", rdb, adapter.Config{Prefix: prefix, RequestsTimeout: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	defer n.stop()
	waitCluster(t, n)
	badOpts, err := msgpack.Marshal([]any{"emitter", map[string]any{"type": 2, "data": []any{"x"}, "nsp": "/"}, "r1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][]byte{{0xc1}, badOpts, {0xc1}} {
		if err := rdb.Publish(context.Background(), prefix+"#/#", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(logs.String(), "ignoring malformed adapter messages") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning of the malformed messages; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if got := logs.Count("ignoring malformed adapter messages", "level=WARN"); got != 1 {
		t.Fatalf("%d warnings within 10 s, want 1 at WARN; log:\n%s", got, logs.String())
	}
}
