package lastseen_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// The read path over mixed users: online, away, offline in the buffer,
// offline only in the store, offline known to the engine, never seen,
// hidden by each rule; duplicates in request order. One status read, one
// Redis round trip, one LastSeen query for the misses, one Privacy and one
// ContactOf query.
func TestReaderMixed(t *testing.T) {
	type bufferKind struct {
		name string
		new  func(t *testing.T) (lastseen.Buffer, *countHook)
	}
	kinds := []bufferKind{
		{"memory", func(*testing.T) (lastseen.Buffer, *countHook) { return lastseen.NewMemory(), nil }},
		{"redis", func(t *testing.T) (lastseen.Buffer, *countHook) {
			h := &countHook{}
			b, _ := redisBuffer(t, h)
			return b, h
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			stores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
				testReaderMixed(t, k.new, newStore)
			})
		})
	}
}

func testReaderMixed(t *testing.T, newBuffer func(t *testing.T) (lastseen.Buffer, *countHook), newStore func(t *testing.T) store.Store) {
	ctx := t.Context()
	buf, hook := newBuffer(t)
	st := &wrapStore{Store: newStore(t)}
	clk := newClock(now)
	status := &fakeStatus{}
	status.Set(presence.UserPresence{UserID: "on", Status: presence.Online, Since: now.Add(-time.Minute)})
	status.Set(presence.UserPresence{UserID: "aw", Status: presence.Away, Since: now.Add(-10 * time.Minute)})
	status.Set(presence.UserPresence{UserID: "eng", Status: presence.Offline, LastSeen: now.Add(-2 * time.Hour)})

	tBuf := now.Add(-5*time.Minute - 30*time.Second)     // in the buffer (and older in the store)
	tSto := now.Add(-26 * time.Hour)                     // only in the store
	tMe := now.Add(-42*time.Second - 7*time.Millisecond) // the viewer, buffer
	must(t, buf.Record(ctx, []store.LastSeen{
		{UserID: "buf", At: tBuf}, {UserID: "me", At: tMe}, {UserID: "con", At: tBuf}, {UserID: "hidon", At: tBuf},
	}))
	must(t, st.UpsertLastSeen(ctx, []store.LastSeen{
		{UserID: "buf", At: tBuf.Add(-time.Hour)}, {UserID: "sto", At: tSto}, {UserID: "hid", At: now.Add(-10 * 24 * time.Hour)},
		{UserID: "nocon", At: tSto}, {UserID: "eng", At: now.Add(-3 * time.Hour)},
	}))
	must(t, st.SetPrivacy(ctx, "hid", store.Nobody))
	must(t, st.SetPrivacy(ctx, "hidon", store.Nobody))
	must(t, st.SetPrivacy(ctx, "con", store.Contacts))
	must(t, st.SetPrivacy(ctx, "nocon", store.Contacts))
	must(t, st.SetContacts(ctx, "con", []string{"me", "x"}))
	must(t, st.SetContacts(ctx, "nocon", []string{"x"}))
	status.Set(presence.UserPresence{UserID: "hidon", Status: presence.Online})

	r := lastseen.NewReader(lastseen.ReaderDeps{Status: status, Buffer: buf, Store: st, Now: clk.Now})
	ask := []string{"on", "buf", "sto", "eng", "never", "hid", "con", "nocon", "aw", "buf", "me", "hidon", "on"}
	st.resetCounts()
	if hook != nil {
		hook.reset()
	}
	got, err := r.Presences(ctx, "me", ask)
	must(t, err)

	vis := func(id, status string, lastSeen *string, display string) lastseen.Presence {
		return lastseen.Presence{UserID: id, Status: status, LastSeen: lastSeen, Display: display}
	}
	hid := func(id, bucket, display string) lastseen.Presence {
		return lastseen.Presence{UserID: id, Status: "hidden", LastSeenBucket: str(bucket), Display: display}
	}
	want := []lastseen.Presence{
		vis("on", "online", nil, "online"),
		vis("buf", "offline", str("2026-11-30T11:54:00.000Z"), "last seen 6 minutes ago"),
		vis("sto", "offline", str("2026-11-29T10:00:00.000Z"), "last seen yesterday"),
		vis("eng", "offline", str("2026-11-30T10:00:00.000Z"), "last seen 2 hours ago"),
		vis("never", "offline", nil, "never seen"),
		hid("hid", "within_month", "last seen within a month"),
		vis("con", "offline", str("2026-11-30T11:54:00.000Z"), "last seen 6 minutes ago"),
		hid("nocon", "recently", "last seen recently"),
		vis("aw", "away", nil, "away"),
		vis("buf", "offline", str("2026-11-30T11:54:00.000Z"), "last seen 6 minutes ago"),
		vis("me", "offline", str("2026-11-30T11:59:17.993Z"), "last seen just now"),
		hid("hidon", "recently", "last seen recently"),
		vis("on", "online", nil, "online"),
	}
	if len(got) != len(want) {
		t.Fatalf("%d presences for %d ids", len(got), len(ask))
	}
	for i := range want {
		if !presenceEqual(got[i], want[i]) {
			t.Errorf("%d %s:\n  got  %s\n  want %s", i, ask[i], js(got[i]), js(want[i]))
		}
	}

	if n := status.calls.Load(); n != 1 {
		t.Errorf("%d status reads, want 1", n)
	}
	if hook != nil {
		if n := hook.n.Load(); n != 1 {
			t.Errorf("%d Redis round trips (%v), want 1", n, hook.names())
		}
		if names := hook.names(); len(names) != 1 || names[0] != "zmscore" {
			t.Errorf("Redis commands %v, want [zmscore]", names)
		}
	}
	if n := st.lastSeen.Load(); n != 1 {
		t.Errorf("%d LastSeen queries, want 1", n)
	}
	st.mu.Lock()
	misses := slices.Sorted(slices.Values(st.lastSeenIDs))
	st.mu.Unlock()
	// eng is known to the engine, buf/con/me/hidon are in the buffer
	// (hidon is online anyway).
	if wantMisses := []string{"hid", "never", "nocon", "sto"}; !slices.Equal(misses, wantMisses) {
		t.Errorf("store asked for %v, want the misses %v", misses, wantMisses)
	}
	if n := st.privacy.Load(); n != 1 {
		t.Errorf("%d Privacy queries, want 1", n)
	}
	if n := st.contactOf.Load(); n != 1 {
		t.Errorf("%d ContactOf queries, want 1", n)
	}
}

// Queries that are not needed are not made.
func TestReaderSkipsQueries(t *testing.T) {
	ctx := t.Context()
	fs := newFakeStore()
	must(t, fs.UpsertLastSeen(ctx, []store.LastSeen{{UserID: "s", At: now.Add(-time.Hour)}}))
	must(t, fs.SetPrivacy(ctx, "c", store.Contacts))
	must(t, fs.SetPrivacy(ctx, "shy", store.Nobody))
	status := &fakeStatus{}
	status.Set(presence.UserPresence{UserID: "on", Status: presence.Online})
	status.Set(presence.UserPresence{UserID: "on2", Status: presence.Away})
	buf := &flakyBuffer{Buffer: lastseen.NewMemory()}
	must(t, buf.Record(ctx, []store.LastSeen{{UserID: "b", At: now.Add(-time.Minute)}}))

	cases := []struct {
		name                               string
		viewer                             string
		ids                                []string
		gets, lastSeen, privacy, contactOf int64
	}{
		{"self only", "s", []string{"s", "s"}, 1, 1, 0, 0},
		{"all online", "v", []string{"on", "on2"}, 0, 0, 1, 0},
		{"buffer hits only", "v", []string{"b"}, 1, 0, 1, 0},
		{"contacts target", "v", []string{"c", "on"}, 1, 1, 1, 1},
		{"no contacts target", "v", []string{"s", "b", "on"}, 1, 1, 1, 0},
		{"viewer hides: no contact lookup", "shy", []string{"c"}, 1, 1, 1, 0},
		{"empty", "v", nil, 0, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &wrapStore{Store: fs}
			buf.gets.Store(0)
			r := lastseen.NewReader(lastseen.ReaderDeps{Status: status, Buffer: buf, Store: st, Now: func() time.Time { return now }})
			got, err := r.Presences(ctx, c.viewer, c.ids)
			must(t, err)
			if len(got) != len(c.ids) {
				t.Fatalf("%d answers", len(got))
			}
			if g := buf.gets.Load(); g != c.gets {
				t.Errorf("buffer gets %d, want %d", g, c.gets)
			}
			if g := st.lastSeen.Load(); g != c.lastSeen {
				t.Errorf("LastSeen %d, want %d", g, c.lastSeen)
			}
			if g := st.privacy.Load(); g != c.privacy {
				t.Errorf("Privacy %d, want %d", g, c.privacy)
			}
			if g := st.contactOf.Load(); g != c.contactOf {
				t.Errorf("ContactOf %d, want %d", g, c.contactOf)
			}
		})
	}
}

// With StoredMaxAge, the store's answers (a time, or none) are kept that
// long; a time the buffer holds still wins over a kept answer.
func TestReaderKeepsStoreAnswers(t *testing.T) {
	ctx := t.Context()
	fs := newFakeStore()
	tSto := now.Add(-30 * 24 * time.Hour)
	must(t, fs.UpsertLastSeen(ctx, []store.LastSeen{{UserID: "s", At: tSto}}))
	st := &wrapStore{Store: fs}
	buf := lastseen.NewMemory()
	clk := newClock(now)
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Buffer: buf, Store: st, Now: clk.Now, StoredMaxAge: 30 * time.Second})
	ask := func(want int64) []lastseen.Presence {
		t.Helper()
		st.resetCounts()
		got, err := r.Presences(ctx, "v", []string{"s", "never"})
		must(t, err)
		if n := st.lastSeen.Load(); n != want {
			t.Errorf("store LastSeen reads %d, want %d", n, want)
		}
		return got
	}
	check := func(got []lastseen.Presence, sWant, neverWant string) {
		t.Helper()
		if ls := got[0].LastSeen; ls == nil || *ls != sWant {
			t.Errorf("s: %s, want last seen %s", js(got[0]), sWant)
		}
		if neverWant == "" && got[1].LastSeen != nil || neverWant != "" && (got[1].LastSeen == nil || *got[1].LastSeen != neverWant) {
			t.Errorf("never: %s, want last seen %q", js(got[1]), neverWant)
		}
	}
	check(ask(1), timestamp.Format(tSto), "")
	clk.Advance(29 * time.Second)
	check(ask(0), timestamp.Format(tSto), "") // kept
	seen := now                               // a whole minute: shown as it is
	must(t, buf.Record(ctx, []store.LastSeen{{UserID: "never", At: seen}}))
	check(ask(0), timestamp.Format(tSto), timestamp.Format(seen)) // the buffer wins
	clk.Advance(2 * time.Second)
	check(ask(1), timestamp.Format(tSto), timestamp.Format(seen)) // s read again
	unkept := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Store: st, Now: clk.Now, StoredMaxAge: time.Minute})
	st.resetCounts()
	for range 2 {
		_, err := unkept.Presences(ctx, "v", []string{"s"})
		must(t, err)
	}
	if n := st.lastSeen.Load(); n != 2 {
		t.Errorf("without a buffer: %d store reads for 2 queries, want 2 (nothing kept)", n)
	}
}

type failingStatus struct{}

func (failingStatus) Users(context.Context, []string) ([]presence.UserPresence, error) {
	return nil, presence.ErrUnavailable
}

func TestReaderErrors(t *testing.T) {
	ctx := t.Context()
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: failingStatus{}, Store: newFakeStore()})
	if _, err := r.Presences(ctx, "v", []string{"a"}); !errors.Is(err, presence.ErrUnavailable) {
		t.Errorf("status down: %v", err)
	}
	buf := &flakyBuffer{Buffer: lastseen.NewMemory()}
	r = lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Buffer: brokenGet{buf}, Store: newFakeStore()})
	if _, err := r.Presences(ctx, "v", []string{"a"}); !errors.Is(err, lastseen.ErrUnavailable) {
		t.Errorf("buffer down: %v", err)
	}
	// Without a buffer, the store alone.
	fs := newFakeStore()
	must(t, fs.UpsertLastSeen(ctx, []store.LastSeen{{UserID: "a", At: now.Add(-time.Hour)}}))
	r = lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Store: fs, Now: func() time.Time { return now }})
	got, err := r.Presence(ctx, "v", "a")
	must(t, err)
	if got.Display != "last seen 1 hour ago" {
		t.Errorf("no buffer: %s", js(got))
	}
}

type brokenGet struct{ lastseen.Buffer }

func (brokenGet) Get(context.Context, []string) ([]time.Time, error) {
	return nil, lastseen.ErrUnavailable
}

// PresencesFor: one target's status change, filtered for each subscriber.
func TestReaderPresencesFor(t *testing.T) {
	ctx := t.Context()
	fs := newFakeStore()
	st := &wrapStore{Store: fs}
	must(t, fs.SetPrivacy(ctx, "t", store.Contacts))
	must(t, fs.SetContacts(ctx, "t", []string{"friend", "shyfriend"}))
	must(t, fs.SetPrivacy(ctx, "shyfriend", store.Nobody))
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Buffer: lastseen.NewMemory(), Store: st, Now: func() time.Time { return now }})
	gone := now.Add(-90*time.Second - 500*time.Millisecond)
	viewers := []string{"t", "friend", "stranger", "shyfriend", "friend"}
	got, err := r.PresencesFor(ctx, presence.UserPresence{UserID: "t", Status: presence.Offline, LastSeen: gone}, viewers)
	must(t, err)
	want := []lastseen.Presence{
		{UserID: "t", Status: "offline", LastSeen: str("2026-11-30T11:58:29.500Z"), Display: "last seen 1 minute ago"},
		{UserID: "t", Status: "offline", LastSeen: str("2026-11-30T11:58:00.000Z"), Display: "last seen 2 minutes ago"},
		{UserID: "t", Status: "hidden", LastSeenBucket: str("recently"), Display: "last seen recently"},
		{UserID: "t", Status: "hidden", LastSeenBucket: str("recently"), Display: "last seen recently"},
		{UserID: "t", Status: "offline", LastSeen: str("2026-11-30T11:58:00.000Z"), Display: "last seen 2 minutes ago"},
	}
	for i := range want {
		if !presenceEqual(got[i], want[i]) {
			t.Errorf("viewer %s:\n  got  %s\n  want %s", viewers[i], js(got[i]), js(want[i]))
		}
	}
	if st.privacy.Load() != 1 || st.lastSeen.Load() != 0 {
		t.Errorf("privacy %d lastSeen %d, want 1 and 0", st.privacy.Load(), st.lastSeen.Load())
	}
	// one query for friend and stranger (shyfriend hides everything anyway)
	if n, m := st.contactOf.Load(), st.contactsAmong.Load(); n != 0 || m != 1 {
		t.Errorf("ContactOf %d, ContactsAmong %d, want 0 and 1", n, m)
	}

	// Online: no last-seen lookup at all; unknown offline time: looked up.
	got, err = r.PresencesFor(ctx, presence.UserPresence{UserID: "t", Status: presence.Online}, []string{"friend"})
	must(t, err)
	if got[0].Status != "online" {
		t.Errorf("online: %s", js(got[0]))
	}
	must(t, fs.UpsertLastSeen(ctx, []store.LastSeen{{UserID: "t", At: gone}}))
	got, err = r.PresencesFor(ctx, presence.UserPresence{UserID: "t", Status: presence.Offline}, []string{"friend"})
	must(t, err)
	if got[0].LastSeen == nil || *got[0].LastSeen != "2026-11-30T11:58:00.000Z" {
		t.Errorf("looked up: %s", js(got[0]))
	}
}
