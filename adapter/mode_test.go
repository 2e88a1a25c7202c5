package adapter_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/logbuf"
)

// A node in the other Pub/Sub mode than the cluster's is found: at start
// (OtherMode, which presenced turns into a configuration error) and while
// both run (an error in the log). Nodes in one mode find nothing.
func TestPubSubModeMismatchFound(t *testing.T) {
	rdb := needRedis(t)
	ctx := context.Background()
	prefix := uniquePrefix(t)
	classic, err := adapter.New(ctx, rdb, adapter.Config{Prefix: prefix, Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classic.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		other, err := adapter.OtherMode(ctx, rdb, prefix, true)
		if err != nil {
			t.Fatal(err)
		}
		if other == "n1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sharded node finds %q, want the classic node n1", other)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if other, err := adapter.OtherMode(ctx, rdb, prefix, false); err != nil || other != "" {
		t.Fatalf("a classic node finds %q (%v), want nothing", other, err)
	}
	var logs logbuf.Buffer
	sharded, err := adapter.New(ctx, rdb, adapter.Config{Prefix: prefix, Sharded: true, Name: "n2", Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sharded.Close() })
	for deadline = time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "other pub/sub mode"); {
		if time.Now().After(deadline) {
			t.Fatalf("no error logged by the sharded node:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := logs.String(); !strings.Contains(s, "other_node=n1") || !strings.Contains(s, "PRESENCE_REDIS_SHARDED") {
		t.Fatalf("the error does not name the other node and the setting:\n%s", s)
	}
}
