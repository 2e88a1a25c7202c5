package lastseen_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// With the Redis engine and the Redis buffer on one Redis, a query of any
// size reads status and buffered last-seen in ONE round trip (CONTRACT:
// presence:query), plus the store only for users neither knows.
func TestReaderOneRoundTripOnRedis(t *testing.T) {
	ctx := context.Background()
	hook := &countHook{}
	buf, _, _, eng := redisEngineEnv(t, hook)
	fs := newFakeStore()
	st := &wrapStore{Store: fs}
	for _, u := range []string{"on1", "on2"} {
		if err := eng.Connect(ctx, presence.Socket{ID: "s-" + u, UserID: u}); err != nil {
			t.Fatal(err)
		}
	}
	seen := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Millisecond)
	must(t, buf.Record(ctx, []store.LastSeen{{UserID: "buffered", At: seen}}))
	must(t, fs.UpsertLastSeen(ctx, []store.LastSeen{{UserID: "stored", At: seen.Add(-time.Hour)}}))

	ids := []string{"on1", "buffered", "stored", "never", "on2"}
	for i := range 995 {
		ids = append(ids, fmt.Sprintf("x%d", i))
	}
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: st})
	hook.reset()
	st.resetCounts()
	got, err := r.Presences(ctx, "viewer", ids)
	must(t, err)
	if n := hook.n.Load(); n != 1 {
		t.Errorf("%d Redis round trips for %d ids (%v), want 1", n, len(ids), hook.names())
	}
	if n := st.lastSeen.Load(); n != 1 {
		t.Errorf("%d store last-seen queries, want 1 (for the misses)", n)
	}
	want := map[string]string{"on1": "online", "on2": "online", "buffered": "offline", "stored": "offline", "never": "offline"}
	for _, p := range got[:5] {
		if p.Status != want[p.UserID] {
			t.Errorf("%s: status %q, want %q", p.UserID, p.Status, want[p.UserID])
		}
	}
	if got[1].LastSeen == nil || got[2].LastSeen == nil || got[3].LastSeen != nil {
		t.Errorf("last-seen: buffered %v, stored %v, never %v", got[1].LastSeen, got[2].LastSeen, got[3].LastSeen)
	}
}

// The slices a query works in are kept for the next (scratch.go): a query
// of 100 buffered users, then one of 100 others never seen, must not give
// the second any of the first's times.
func TestReaderScratchHoldsNothingOver(t *testing.T) {
	ctx := context.Background()
	buf, _, _, eng := redisEngineEnv(t, &countHook{})
	fs := newFakeStore()
	seen := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Millisecond)
	var first, second []string
	var recs []store.LastSeen
	for i := range 100 {
		first = append(first, fmt.Sprintf("b%d", i))
		second = append(second, fmt.Sprintf("n%d", i))
		recs = append(recs, store.LastSeen{UserID: first[i], At: seen})
	}
	must(t, buf.Record(ctx, recs))
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: fs})
	for round := range 3 {
		got, err := r.Presences(ctx, "viewer", first)
		must(t, err)
		for _, p := range got {
			if p.Status != "offline" || p.LastSeen == nil {
				t.Fatalf("round %d: buffered %s: %+v, want offline with a last-seen", round, p.UserID, p)
			}
		}
		got, err = r.Presences(ctx, "viewer", second)
		must(t, err)
		for i, p := range got {
			if p.UserID != second[i] || p.Status != "offline" || p.LastSeen != nil || p.LastSeenBucket != nil {
				t.Fatalf("round %d: never seen %s: %+v, want offline with no last-seen", round, second[i], p)
			}
		}
	}
}
