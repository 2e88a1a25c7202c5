package lastseen_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/store"
)

// runBufferSuite is the contract of lastseen.Buffer; memory_test.go and
// redis_test.go run it against each implementation.
func runBufferSuite(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b lastseen.Buffer)
	}{
		{"RecordThenGet", testRecordThenGet},
		{"NeverBackwards", testBufferNeverBackwards},
		{"DuplicatesInBatch", testBufferDuplicates},
		{"ClaimAck", testClaimAck},
		{"RecordWhileClaimed", testRecordWhileClaimed},
		{"Release", testRelease},
		{"RequeueStaleClaims", testRequeue},
		{"StaleEndKeepsNewClaim", testStaleEndKeepsNewClaim},
		{"Trim", testTrim},
		{"ConcurrentClaimsDisjoint", testConcurrentClaims},
		{"Empty", testEmpty},
		{"LargeBatches", testLargeBatches},
		{"Raise", testRaise},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newBuffer(t)) })
	}
}

func ls(id string, at time.Time) store.LastSeen { return store.LastSeen{UserID: id, At: at} }

func wantStats(t *testing.T, b lastseen.Buffer, want lastseen.BufferStats) {
	t.Helper()
	got, err := b.Stats(t.Context())
	must(t, err)
	if got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

func wantGet(t *testing.T, b lastseen.Buffer, ids []string, want []time.Time) {
	t.Helper()
	got, err := b.Get(t.Context(), ids)
	must(t, err)
	if len(got) != len(want) {
		t.Fatalf("Get(%v) = %d times, want %d", ids, len(got), len(want))
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("Get %s = %v, want %v", ids[i], got[i], want[i])
		}
	}
}

// claimAll claims everything dirty at now and returns user → time.
func claimAll(t *testing.T, b lastseen.Buffer, now time.Time) (lastseen.Claim, map[string]time.Time) {
	t.Helper()
	c, err := b.Claim(t.Context(), 100_000, now)
	must(t, err)
	m := map[string]time.Time{}
	for _, e := range c.Entries {
		if _, dup := m[e.UserID]; dup {
			t.Fatalf("user %s claimed twice in one claim", e.UserID)
		}
		m[e.UserID] = e.At
	}
	return c, m
}

func testRecordThenGet(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	a, c := t0, t0.Add(1500*time.Millisecond)
	must(t, b.Record(ctx, []store.LastSeen{ls("a", a), ls("c", c)}))
	wantGet(t, b, []string{"a", "b", "c", "a"}, []time.Time{a, {}, c, a})
	got, _ := b.Get(ctx, []string{"a"})
	if got[0].Location() != time.UTC {
		t.Errorf("Get returns %v, want UTC", got[0].Location())
	}
	// Sub-millisecond parts are dropped, as in the store.
	must(t, b.Record(ctx, []store.LastSeen{ls("d", t0.Add(999*time.Microsecond))}))
	wantGet(t, b, []string{"d"}, []time.Time{t0})
	wantStats(t, b, lastseen.BufferStats{Users: 3, Dirty: 3})
}

func testBufferNeverBackwards(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0.Add(time.Minute))}))
	c, _ := claimAll(t, b, t0)
	must(t, b.Ack(ctx, c))
	// An earlier or equal time neither lowers the value nor marks dirty.
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0)}))
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0.Add(time.Minute))}))
	wantGet(t, b, []string{"u"}, []time.Time{t0.Add(time.Minute)})
	wantStats(t, b, lastseen.BufferStats{Users: 1})
	// A later one does both.
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0.Add(2*time.Minute))}))
	wantGet(t, b, []string{"u"}, []time.Time{t0.Add(2 * time.Minute)})
	wantStats(t, b, lastseen.BufferStats{Users: 1, Dirty: 1})
}

func testBufferDuplicates(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0.Add(time.Second)), ls("u", t0.Add(3*time.Second)), ls("u", t0)}))
	wantGet(t, b, []string{"u"}, []time.Time{t0.Add(3 * time.Second)})
	_, m := claimAll(t, b, t0)
	if len(m) != 1 || !m["u"].Equal(t0.Add(3*time.Second)) {
		t.Fatalf("claimed %v", m)
	}
}

func testClaimAck(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	want := map[string]time.Time{}
	var batch []store.LastSeen
	for i := range 5 {
		id := fmt.Sprintf("u%d", i)
		want[id] = t0.Add(time.Duration(i) * time.Second)
		batch = append(batch, ls(id, want[id]))
	}
	must(t, b.Record(ctx, batch))

	c1, err := b.Claim(ctx, 3, t0)
	must(t, err)
	if len(c1.Entries) != 3 || c1.At != t0.UnixMilli() {
		t.Fatalf("first claim = %+v, want 3 entries at %d", c1, t0.UnixMilli())
	}
	wantStats(t, b, lastseen.BufferStats{Users: 5, Dirty: 2, Claimed: 3})
	c2, err := b.Claim(ctx, 3, t0.Add(time.Millisecond))
	must(t, err)
	if len(c2.Entries) != 2 {
		t.Fatalf("second claim = %d entries, want 2", len(c2.Entries))
	}
	c3, err := b.Claim(ctx, 3, t0)
	must(t, err)
	if len(c3.Entries) != 0 {
		t.Fatalf("third claim = %d entries, want 0", len(c3.Entries))
	}
	got := map[string]time.Time{}
	for _, e := range append(slices.Clone(c1.Entries), c2.Entries...) {
		if _, dup := got[e.UserID]; dup {
			t.Fatalf("%s claimed twice", e.UserID)
		}
		got[e.UserID] = e.At
	}
	for id, at := range want {
		if !got[id].Equal(at) {
			t.Errorf("claimed %s at %v, want %v", id, got[id], at)
		}
	}
	wantStats(t, b, lastseen.BufferStats{Users: 5, Claimed: 5})
	must(t, b.Ack(ctx, c1))
	must(t, b.Ack(ctx, c2))
	wantStats(t, b, lastseen.BufferStats{Users: 5})
	// Acknowledged users stay readable.
	wantGet(t, b, []string{"u0", "u4"}, []time.Time{want["u0"], want["u4"]})
}

func testRecordWhileClaimed(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0)}))
	c, m := claimAll(t, b, t0)
	if !m["u"].Equal(t0) {
		t.Fatalf("claimed %v", m)
	}
	// A newer time arrives while the flusher writes the old one.
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0.Add(time.Second))}))
	wantStats(t, b, lastseen.BufferStats{Users: 1, Dirty: 1, Claimed: 1})
	must(t, b.Ack(ctx, c))
	wantStats(t, b, lastseen.BufferStats{Users: 1, Dirty: 1})
	_, m = claimAll(t, b, t0.Add(time.Second))
	if !m["u"].Equal(t0.Add(time.Second)) {
		t.Fatalf("second claim %v, want the newer time", m)
	}
}

func testRelease(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("a", t0), ls("b", t0.Add(time.Second))}))
	c, _ := claimAll(t, b, t0)
	wantStats(t, b, lastseen.BufferStats{Users: 2, Claimed: 2})
	must(t, b.Release(ctx, c))
	wantStats(t, b, lastseen.BufferStats{Users: 2, Dirty: 2})
	_, m := claimAll(t, b, t0)
	if len(m) != 2 || !m["a"].Equal(t0) || !m["b"].Equal(t0.Add(time.Second)) {
		t.Fatalf("after release claimed %v", m)
	}
}

func testRequeue(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("a", t0), ls("b", t0)}))
	c1, err := b.Claim(ctx, 1, t0)
	must(t, err)
	_, err = b.Claim(ctx, 1, t0.Add(time.Minute))
	must(t, err)
	// Claims made at or after the cutoff stay.
	n, err := b.Requeue(ctx, t0)
	must(t, err)
	if n != 0 {
		t.Fatalf("requeue at the claim time = %d, want 0", n)
	}
	n, err = b.Requeue(ctx, t0.Add(time.Millisecond))
	must(t, err)
	if n != 1 {
		t.Fatalf("requeue = %d, want 1", n)
	}
	wantStats(t, b, lastseen.BufferStats{Users: 2, Dirty: 1, Claimed: 1})
	_, m := claimAll(t, b, t0.Add(2*time.Minute))
	if _, ok := m[c1.Entries[0].UserID]; !ok || len(m) != 1 {
		t.Fatalf("after requeue claimed %v, want %s", m, c1.Entries[0].UserID)
	}
}

func testStaleEndKeepsNewClaim(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("u", t0)}))
	old, _ := claimAll(t, b, t0)
	_, err := b.Requeue(ctx, t0.Add(3*time.Minute))
	must(t, err)
	fresh, _ := claimAll(t, b, t0.Add(3*time.Minute))
	if len(fresh.Entries) != 1 {
		t.Fatalf("fresh claim %+v", fresh)
	}
	// The slow first flusher ends its claim late: the new claim stays.
	must(t, b.Ack(ctx, old))
	wantStats(t, b, lastseen.BufferStats{Users: 1, Claimed: 1})
	// A late release makes the user dirty (a harmless extra write) and still
	// leaves the new claim.
	must(t, b.Release(ctx, old))
	wantStats(t, b, lastseen.BufferStats{Users: 1, Dirty: 1, Claimed: 1})
	must(t, b.Ack(ctx, fresh))
	wantStats(t, b, lastseen.BufferStats{Users: 1, Dirty: 1})
}

func testTrim(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	old, recent := t0.Add(-8*24*time.Hour), t0.Add(-time.Hour)
	var batch []store.LastSeen
	for i := range 10 {
		batch = append(batch, ls(fmt.Sprintf("old%d", i), old.Add(time.Duration(i)*time.Second)))
	}
	batch = append(batch, ls("recent", recent), ls("olddirty", old), ls("oldclaimed", old))
	must(t, b.Record(ctx, batch))
	c, _ := claimAll(t, b, t0)
	var keep []store.LastSeen
	for _, e := range c.Entries {
		if e.UserID != "oldclaimed" {
			keep = append(keep, e)
		}
	}
	must(t, b.Ack(ctx, lastseen.Claim{At: c.At, Entries: keep}))
	// Make olddirty dirty again with the same old value: claim ended by
	// release.
	must(t, b.Release(ctx, lastseen.Claim{At: c.At, Entries: []store.LastSeen{ls("olddirty", old)}}))
	wantStats(t, b, lastseen.BufferStats{Users: 13, Dirty: 1, Claimed: 1})

	cutoff := t0.Add(-7 * 24 * time.Hour)
	n, err := b.Trim(ctx, cutoff, 4)
	must(t, err)
	if n != 4 {
		t.Fatalf("trim with limit 4 = %d", n)
	}
	total := n
	for n > 0 {
		n, err = b.Trim(ctx, cutoff, 4)
		must(t, err)
		total += n
	}
	if total != 10 {
		t.Fatalf("trimmed %d, want the 10 clean old users", total)
	}
	wantStats(t, b, lastseen.BufferStats{Users: 3, Dirty: 1, Claimed: 1})
	wantGet(t, b, []string{"recent", "olddirty", "oldclaimed", "old0"}, []time.Time{recent, old, old, {}})
}

func testConcurrentClaims(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	const users = 2000
	var batch []store.LastSeen
	for i := range users {
		batch = append(batch, ls(fmt.Sprintf("u%04d", i), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	must(t, b.Record(ctx, batch))
	var (
		mu  sync.Mutex
		got = map[string]int{}
		wg  sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for {
				c, err := b.Claim(ctx, 37, t0.Add(time.Duration(w)*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				if len(c.Entries) == 0 {
					return
				}
				mu.Lock()
				for _, e := range c.Entries {
					got[e.UserID]++
				}
				mu.Unlock()
				if err := b.Ack(ctx, c); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(got) != users {
		t.Fatalf("claimed %d distinct users, want %d", len(got), users)
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("%s claimed %d times", id, n)
		}
	}
	wantStats(t, b, lastseen.BufferStats{Users: users})
}

func testEmpty(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, nil))
	got, err := b.Get(ctx, nil)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("Get(nil) = %v", got)
	}
	c, err := b.Claim(ctx, 10, t0)
	must(t, err)
	if len(c.Entries) != 0 {
		t.Fatalf("claim on empty = %+v", c)
	}
	must(t, b.Ack(ctx, c))
	must(t, b.Release(ctx, c))
	n, err := b.Requeue(ctx, t0)
	must(t, err)
	if n != 0 {
		t.Fatal(n)
	}
	n, err = b.Trim(ctx, t0, 10)
	must(t, err)
	if n != 0 {
		t.Fatal(n)
	}
	wantStats(t, b, lastseen.BufferStats{})
}

func testLargeBatches(t *testing.T, b lastseen.Buffer) {
	ctx := context.Background()
	const users = 2500 // more than one script call's chunk
	var batch []store.LastSeen
	var ids []string
	for i := range users {
		id := fmt.Sprintf("big%04d", i)
		ids = append(ids, id)
		batch = append(batch, ls(id, t0.Add(time.Duration(i)*time.Second)))
	}
	must(t, b.Record(ctx, batch))
	got, err := b.Get(ctx, ids)
	must(t, err)
	for i := range users {
		if !got[i].Equal(batch[i].At) {
			t.Fatalf("%s = %v, want %v", ids[i], got[i], batch[i].At)
		}
	}
	c, err := b.Claim(ctx, users, t0)
	must(t, err)
	if len(c.Entries) != users {
		t.Fatalf("claimed %d", len(c.Entries))
	}
	must(t, b.Release(ctx, c))
	wantStats(t, b, lastseen.BufferStats{Users: users, Dirty: users})
	c, err = b.Claim(ctx, users, t0)
	must(t, err)
	must(t, b.Ack(ctx, c))
	n, err := b.Requeue(ctx, t0.Add(time.Hour))
	must(t, err)
	if n != 0 {
		t.Fatalf("requeued %d after ack", n)
	}
	wantStats(t, b, lastseen.BufferStats{Users: users})
}

// Raise moves held users' times later, never earlier, adds no user and
// marks none dirty.
func testRaise(t *testing.T, b lastseen.Buffer) {
	ctx := t.Context()
	must(t, b.Record(ctx, []store.LastSeen{ls("a", t0), ls("b", t0)}))
	c, err := b.Claim(ctx, 10, t0)
	must(t, err)
	must(t, b.Ack(ctx, c))
	must(t, b.Raise(ctx, []store.LastSeen{ls("a", t0.Add(time.Minute)), ls("b", t0.Add(-time.Minute)), ls("c", t0), ls("a", t0.Add(time.Second))}))
	wantGet(t, b, []string{"a", "b", "c"}, []time.Time{t0.Add(time.Minute), t0, {}})
	wantStats(t, b, lastseen.BufferStats{Users: 2})
	must(t, b.Raise(ctx, nil))
}
