package redisepoch_test

import (
	"testing"

	"github.com/presenced/presenced/internal/leakcheck"
	"github.com/presenced/presenced/internal/redisepoch"
	"github.com/presenced/presenced/internal/redistest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// The epoch stays while its key does, and a new one comes once it is gone.
func TestRead(t *testing.T) {
	ctx := t.Context()
	rdb := redistest.Client(t)
	key := redistest.Prefix(t, rdb, "epoch") + ":epoch"
	first, err := redisepoch.Read(ctx, rdb, key)
	if err != nil || first == "" {
		t.Fatalf("first read: %q, %v", first, err)
	}
	if again, err := redisepoch.Read(ctx, rdb, key); err != nil || again != first {
		t.Fatalf("second read: %q, %v; want %q", again, err, first)
	}
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if after, err := redisepoch.Read(ctx, rdb, key); err != nil || after == first || after == "" {
		t.Fatalf("read after the key was lost: %q, %v; want a new epoch, not %q", after, err, first)
	}
}
