// Package storetest is the behaviour suite every store.Store
// implementation must pass. The PostgreSQL and SQLite tests in package
// store call Run with a Backend of their own; a new implementation does
// the same.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/migrations"
	"github.com/presenced/presenced/store"
)

// Store is what the suite needs of an implementation besides store.Store.
type Store interface {
	store.Store
	Stats() store.Stats
	Migrate(ctx context.Context) ([]store.Migration, error)
	MigrationStatus(ctx context.Context) ([]store.Migration, error)
}

// Backend opens stores of one implementation.
type Backend struct {
	// NewDatabase creates a fresh, empty database, removed when tb ends,
	// and returns where it is (a URL, a file path) for Open.
	NewDatabase func(tb testing.TB) string
	// Open opens a store on a database made by NewDatabase, applying
	// migrations unless skipMigrate. The suite closes what it opens.
	Open func(ctx context.Context, where string, skipMigrate bool) (Store, error)
}

// Run runs the whole suite, each case on a fresh database.
func Run(t *testing.T, b Backend) {
	cases := []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"UpsertThenRead", testUpsertThenRead},
		{"NeverBackwards", testNeverBackwards},
		{"DuplicatesInBatch", testDuplicatesInBatch},
		{"OneStatementPerBatch", testOneStatementPerBatch},
		{"ConcurrentUpserts", testConcurrentUpserts},
		{"Privacy", testPrivacy},
		{"Contacts", testContacts},
		{"Members", testMembers},
		{"ConcurrentReplace", testConcurrentReplace},
		{"InvalidChangesNothing", testInvalidChangesNothing},
		{"LargeReads", testLargeReads},
		{"MigrateIdempotent", testMigrateIdempotent},
		{"ConcurrentOpen", testConcurrentOpen},
		{"ConcurrentMigrate", testConcurrentMigrate},
		{"MigrationStatus", testMigrationStatus},
		{"Unavailable", testUnavailable},
		{"OnlineKeeper", testOnlineKeeper},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, b) })
	}
}

// MustOpen opens a store on a fresh database, closed when tb ends.
func MustOpen(tb testing.TB, b Backend) Store {
	tb.Helper()
	return mustOpenAt(tb, b, b.NewDatabase(tb), false)
}

func mustOpenAt(tb testing.TB, b Backend, where string, skipMigrate bool) Store {
	tb.Helper()
	s, err := b.Open(context.Background(), where, skipMigrate)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// base is a fixed instant with a millisecond part, far from the zero time.
var base = time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

func at(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

func ctx(t *testing.T) context.Context { return t.Context() }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantTimes(t *testing.T, s Store, want map[string]time.Time, ask ...string) {
	t.Helper()
	got, err := s.LastSeen(ctx(t), ask)
	must(t, err)
	if len(got) != len(want) {
		t.Errorf("LastSeen(%v) = %v, want %v", ask, got, want)
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || !g.Equal(w) {
			t.Errorf("LastSeen[%s] = %v (present %v), want %v", id, g, ok, w)
		}
	}
}

func testUpsertThenRead(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	// Nanoseconds are not kept: stored times have millisecond precision.
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{
		{UserID: "alice", At: at(1).Add(123_456 * time.Nanosecond)},
		{UserID: "bob", At: at(2).In(time.FixedZone("X", 3600))},
		{UserID: "carol@example.com", At: at(3)},
	}))
	wantTimes(t, s, map[string]time.Time{"alice": at(1), "bob": at(2), "carol@example.com": at(3)},
		"alice", "bob", "carol@example.com", "nobody-seen", "alice")
	got, err := s.LastSeen(ctx(t), []string{"alice"})
	must(t, err)
	if loc := got["alice"].Location(); loc != time.UTC {
		t.Errorf("location %v, want UTC", loc)
	}
	got, err = s.LastSeen(ctx(t), nil)
	must(t, err)
	if got == nil || len(got) != 0 {
		t.Errorf("LastSeen(nil) = %#v, want an empty map", got)
	}
	must(t, s.UpsertLastSeen(ctx(t), nil))
}

func testNeverBackwards(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(10)}, {UserID: "b", At: at(10)}}))
	// An older write after a newer one keeps the newer; a newer one wins.
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(5)}, {UserID: "b", At: at(20)}}))
	wantTimes(t, s, map[string]time.Time{"a": at(10), "b": at(20)}, "a", "b")
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(10)}, {UserID: "b", At: at(-100)}}))
	wantTimes(t, s, map[string]time.Time{"a": at(10), "b": at(20)}, "a", "b")
}

func testDuplicatesInBatch(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{
		{UserID: "a", At: at(1)}, {UserID: "a", At: at(3)}, {UserID: "a", At: at(2)},
		{UserID: "b", At: at(7)}, {UserID: "b", At: at(7)},
		{UserID: "c", At: at(9)}, {UserID: "c", At: at(4)},
	}))
	wantTimes(t, s, map[string]time.Time{"a": at(3), "b": at(7), "c": at(9)}, "a", "b", "c")
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(2)}, {UserID: "a", At: at(8)}, {UserID: "a", At: at(1)}}))
	wantTimes(t, s, map[string]time.Time{"a": at(8)}, "a")
}

func testOneStatementPerBatch(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	users := ids("u", 1000)
	batch := make([]store.LastSeen, 0, 1200)
	for i, id := range users {
		batch = append(batch, store.LastSeen{UserID: id, At: at(i)})
	}
	for i := range 200 { // duplicates, older and newer
		batch = append(batch, store.LastSeen{UserID: users[i], At: at(i + (i%2*2-1)*500)})
	}
	rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })

	before := s.Stats()
	must(t, s.UpsertLastSeen(ctx(t), batch))
	after := s.Stats()
	if d := after.Statements - before.Statements; d != 1 {
		t.Errorf("a batch of %d took %d write statements, want 1", len(batch), d)
	}
	if d := after.Rows - before.Rows; d != 1000 {
		t.Errorf("rows written = %d, want 1000", d)
	}
	must(t, s.UpsertLastSeen(ctx(t), batch)) // nothing newer: one statement, no row changed
	again := s.Stats()
	if d := again.Statements - after.Statements; d != 1 {
		t.Errorf("second batch took %d statements, want 1", d)
	}
	if d := again.Rows - after.Rows; d != 0 {
		t.Errorf("second batch changed %d rows, want 0", d)
	}
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{}))
	if d := s.Stats().Statements - again.Statements; d != 0 {
		t.Errorf("an empty batch took %d statements, want 0", d)
	}
	got, err := s.LastSeen(ctx(t), users)
	must(t, err)
	for i, id := range users {
		want := at(i)
		if i < 200 && i%2 == 1 {
			want = at(i + 500)
		}
		if !got[id].Equal(want) {
			t.Fatalf("LastSeen[%s] = %v, want %v", id, got[id], want)
		}
	}
}

func testConcurrentUpserts(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	users := ids("r", 200)
	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for g := range 2 {
		wg.Go(func() {
			for r := range rounds {
				batch := make([]store.LastSeen, len(users))
				for i, id := range users {
					// goroutine 0 writes even seconds, 1 odd ones; both rise.
					batch[i] = store.LastSeen{UserID: id, At: at(2*r + g)}
				}
				rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				if err := s.UpsertLastSeen(context.Background(), batch); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// A third writer keeps sending stale times.
	wg.Go(func() {
		for r := range rounds {
			if err := s.UpsertLastSeen(context.Background(), []store.LastSeen{{UserID: users[r%len(users)], At: at(-1000)}}); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent upsert: %v", err)
	}
	got, err := s.LastSeen(ctx(t), users)
	must(t, err)
	for _, id := range users {
		if want := at(2*(rounds-1) + 1); !got[id].Equal(want) {
			t.Fatalf("LastSeen[%s] = %v, want the max %v", id, got[id], want)
		}
	}
}

func testPrivacy(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	got, err := s.Privacy(ctx(t), []string{"a", "b", "a"})
	must(t, err)
	if want := map[string]store.Visibility{"a": store.DefaultVisibility, "b": store.DefaultVisibility}; !mapsEqual(got, want) {
		t.Errorf("default privacy = %v, want %v", got, want)
	}
	must(t, s.SetPrivacy(ctx(t), "a", store.Contacts))
	must(t, s.SetPrivacy(ctx(t), "b", store.Nobody))
	must(t, s.SetPrivacy(ctx(t), "b", store.Nobody)) // idempotent
	must(t, s.SetPrivacy(ctx(t), "c", store.Nobody))
	must(t, s.SetPrivacy(ctx(t), "c", store.Everyone))
	got, err = s.Privacy(ctx(t), []string{"a", "b", "c", "d"})
	must(t, err)
	if want := map[string]store.Visibility{"a": store.Contacts, "b": store.Nobody, "c": store.Everyone, "d": store.Everyone}; !mapsEqual(got, want) {
		t.Errorf("privacy = %v, want %v", got, want)
	}
	for _, v := range []store.Visibility{"", "friends", "Everyone", "nobody "} {
		if err := s.SetPrivacy(ctx(t), "a", v); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SetPrivacy(%q) = %v, want ErrInvalid", v, err)
		}
	}
	got, err = s.Privacy(ctx(t), []string{"a"})
	must(t, err)
	if got["a"] != store.Contacts {
		t.Errorf("after refused changes privacy = %v, want contacts", got["a"])
	}
	got, err = s.Privacy(ctx(t), []string{})
	must(t, err)
	if got == nil || len(got) != 0 {
		t.Errorf("Privacy([]) = %#v, want an empty map", got)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func wantContactOf(t *testing.T, s Store, owners []string, viewer string, want map[string]bool) {
	t.Helper()
	got, err := s.ContactOf(ctx(t), owners, viewer)
	must(t, err)
	if !mapsEqual(got, want) {
		t.Errorf("ContactOf(%v, %s) = %v, want %v", owners, viewer, got, want)
	}
}

func testContacts(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	wantContactOf(t, s, []string{"a", "b"}, "v", map[string]bool{"a": false, "b": false})
	must(t, s.SetContacts(ctx(t), "a", []string{"v", "w", "v", "x"}))
	must(t, s.SetContacts(ctx(t), "b", []string{"w"}))
	wantContactOf(t, s, []string{"a", "b", "c", "a"}, "v", map[string]bool{"a": true, "b": false, "c": false})
	wantContactOf(t, s, []string{"a", "b"}, "w", map[string]bool{"a": true, "b": true})
	// Contacts are one-way: v is in a's list, not a in v's.
	wantContactOf(t, s, []string{"v"}, "a", map[string]bool{"v": false})

	// The same facts asked the other way round, in one query.
	q := s.Stats().Queries
	among, err := s.ContactsAmong(ctx(t), "a", []string{"v", "w", "x", "z", "v", "b"})
	must(t, err)
	if want := map[string]bool{"v": true, "w": true, "x": true, "z": false, "b": false}; !mapsEqual(among, want) {
		t.Errorf("ContactsAmong(a) = %v, want %v", among, want)
	}
	if d := s.Stats().Queries - q; d != 1 {
		t.Errorf("ContactsAmong took %d queries, want 1", d)
	}
	if _, err := s.ContactsAmong(ctx(t), "a b", []string{"v"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ContactsAmong with a bad owner: %v, want ErrInvalid", err)
	}

	// Replace, not merge.
	must(t, s.SetContacts(ctx(t), "a", []string{"y", "w"}))
	wantContactOf(t, s, []string{"a"}, "v", map[string]bool{"a": false})
	wantContactOf(t, s, []string{"a"}, "x", map[string]bool{"a": false})
	wantContactOf(t, s, []string{"a"}, "y", map[string]bool{"a": true})
	wantContactOf(t, s, []string{"a", "b"}, "w", map[string]bool{"a": true, "b": true})

	// Idempotent: the same list twice writes no row the second time.
	before := s.Stats()
	must(t, s.SetContacts(ctx(t), "a", []string{"w", "y"}))
	if d := s.Stats().Rows - before.Rows; d != 0 {
		t.Errorf("repeating a contact list changed %d rows, want 0", d)
	}
	wantContactOf(t, s, []string{"a"}, "y", map[string]bool{"a": true})

	// Empty list clears; b is untouched.
	must(t, s.SetContacts(ctx(t), "a", nil))
	wantContactOf(t, s, []string{"a", "b"}, "w", map[string]bool{"a": false, "b": true})

	got, err := s.ContactOf(ctx(t), nil, "w")
	must(t, err)
	if got == nil || len(got) != 0 {
		t.Errorf("ContactOf(nil) = %#v, want an empty map", got)
	}
}

// memberCandidates are the users that testMembers and
// testInvalidChangesNothing put (or try to put) in a conversation, in byte
// order.
var memberCandidates = []string{"A-1", "Z0", "m1", "m2", "u1", "u2", "u3", "u4", "u9"}

// wantMembers checks, through IsMember (what production reads), that
// conv's members among memberCandidates are exactly want (in byte order).
func wantMembers(t *testing.T, s Store, conv string, want ...string) {
	t.Helper()
	var got []string
	for _, user := range memberCandidates {
		ok, err := s.IsMember(ctx(t), conv, user)
		must(t, err)
		if ok {
			got = append(got, user)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("members of %s = %v, want %v", conv, got, want)
	}
}

func testMembers(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	wantMembers(t, s, "conv:1")
	removed, err := s.SetMembers(ctx(t), "conv:1", []string{"u3", "u1", "u2", "u1"})
	must(t, err)
	if len(removed) != 0 {
		t.Errorf("first SetMembers removed %v, want none", removed)
	}
	_, err = s.SetMembers(ctx(t), "conv:2", []string{"u1", "u9"})
	must(t, err)
	wantMembers(t, s, "conv:1", "u1", "u2", "u3")

	removed, err = s.SetMembers(ctx(t), "conv:1", []string{"u4", "u2", "Z0", "A-1"})
	must(t, err)
	if want := []string{"u1", "u3"}; !slices.Equal(removed, want) {
		t.Errorf("removed = %v, want %v", removed, want)
	}
	wantMembers(t, s, "conv:1", "A-1", "Z0", "u2", "u4") // byte order
	wantMembers(t, s, "conv:2", "u1", "u9")

	for _, c := range []struct {
		conv, user string
		want       bool
	}{
		{"conv:1", "u2", true}, {"conv:1", "u1", false}, {"conv:2", "u1", true},
		{"conv:2", "u4", false}, {"conv:3", "u1", false},
	} {
		got, err := s.IsMember(ctx(t), c.conv, c.user)
		must(t, err)
		if got != c.want {
			t.Errorf("IsMember(%s, %s) = %v, want %v", c.conv, c.user, got, c.want)
		}
	}

	removed, err = s.SetMembers(ctx(t), "conv:1", []string{"Z0", "A-1", "u4", "u2"})
	must(t, err)
	if len(removed) != 0 {
		t.Errorf("repeating SetMembers removed %v, want none", removed)
	}
	removed, err = s.SetMembers(ctx(t), "conv:1", nil)
	must(t, err)
	if want := []string{"A-1", "Z0", "u2", "u4"}; !slices.Equal(removed, want) {
		t.Errorf("clearing removed %v, want %v", removed, want)
	}
	wantMembers(t, s, "conv:1")
	wantMembers(t, s, "conv:2", "u1", "u9")
}

// testConcurrentReplace: racing replacements of one list leave exactly
// one of the lists, never a mix.
func testConcurrentReplace(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	const writers, rounds = 6, 8
	own := make([][]string, writers)
	lists := make([][]string, writers)
	for w := range lists {
		own[w] = ids(fmt.Sprintf("w%d-", w), 20)
		lists[w] = append(slices.Clone(own[w]), "common1", "common2")
		slices.Sort(lists[w])
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds*2)
	for w := range writers {
		wg.Go(func() {
			for range rounds {
				if _, err := s.SetMembers(context.Background(), "conv", lists[w]); err != nil {
					errs <- err
				}
				if err := s.SetContacts(context.Background(), "owner", lists[w]); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent replace: %v", err)
	}
	// The member list is one whole list: the common members, and every
	// own member of one writer, none of the others'.
	for _, id := range []string{"common1", "common2"} {
		ok, err := s.IsMember(ctx(t), "conv", id)
		must(t, err)
		if !ok {
			t.Errorf("common member %s lost", id)
		}
	}
	whole := -1
	for w, l := range own {
		n := 0
		for _, id := range l {
			ok, err := s.IsMember(ctx(t), "conv", id)
			must(t, err)
			if ok {
				n++
			}
		}
		switch {
		case n == len(l) && whole == -1:
			whole = w
		case n != 0:
			t.Errorf("after racing SetMembers, %d of writer %d's %d members (writer %d's list is whole): not one of the lists", n, w, len(l), whole)
		}
	}
	if whole == -1 {
		t.Errorf("after racing SetMembers, no writer's list is whole")
	}
	// The contact list is one whole list too: exactly 22 contacts, all
	// from one writer.
	co, err := s.ContactOf(ctx(t), []string{"owner"}, "common1")
	must(t, err)
	if !co["owner"] {
		t.Errorf("common contact lost")
	}
	from := -1
	n := 0
	for w, l := range own {
		for _, id := range l {
			c, err := s.ContactOf(ctx(t), []string{"owner"}, id)
			must(t, err)
			if c["owner"] {
				n++
				if from != -1 && from != w {
					t.Fatalf("contacts mix lists %d and %d", from, w)
				}
				from = w
			}
		}
	}
	if n != 20 {
		t.Errorf("owner has %d of one writer's own contacts, want 20", n)
	}
}

func testInvalidChangesNothing(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(1)}}))
	must(t, s.SetPrivacy(ctx(t), "a", store.Nobody))
	must(t, s.SetContacts(ctx(t), "a", []string{"c1"}))
	_, err := s.SetMembers(ctx(t), "conv", []string{"m1"})
	must(t, err)
	before := s.Stats()

	long := strings.Repeat("x", 129)
	tooMany := ids("n", store.MaxIDs+1)
	bad := []string{"", long, "has space", "semi;colon", "quote\"", "unicodé", "new\nline", "slash/"}
	calls := map[string]func(id string) error{
		"UpsertLastSeen": func(id string) error {
			return s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(100)}, {UserID: id, At: at(100)}})
		},
		"LastSeen":          func(id string) error { _, err := s.LastSeen(ctx(t), []string{"a", id}); return err },
		"Privacy":           func(id string) error { _, err := s.Privacy(ctx(t), []string{id}); return err },
		"SetPrivacy":        func(id string) error { return s.SetPrivacy(ctx(t), id, store.Everyone) },
		"SetContacts":       func(id string) error { return s.SetContacts(ctx(t), "a", []string{"c2", id}) },
		"SetContacts/owner": func(id string) error { return s.SetContacts(ctx(t), id, []string{"c2"}) },
		"ContactOf":         func(id string) error { _, err := s.ContactOf(ctx(t), []string{"a", id}, "c1"); return err },
		"ContactOf/viewer":  func(id string) error { _, err := s.ContactOf(ctx(t), []string{"a"}, id); return err },
		"SetMembers": func(id string) error {
			_, err := s.SetMembers(ctx(t), "conv", []string{"m2", id})
			return err
		},
		"SetMembers/conversation": func(id string) error { _, err := s.SetMembers(ctx(t), id, []string{"m2"}); return err },
		"IsMember":                func(id string) error { _, err := s.IsMember(ctx(t), "conv", id); return err },
		"IsMember/conversation":   func(id string) error { _, err := s.IsMember(ctx(t), id, "m1"); return err },
	}
	for name, call := range calls {
		for _, id := range bad {
			if err := call(id); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s(%q) = %v, want ErrInvalid", name, id, err)
			}
		}
	}
	lists := map[string]func() error{
		"UpsertLastSeen": func() error {
			batch := make([]store.LastSeen, len(tooMany))
			for i, id := range tooMany {
				batch[i] = store.LastSeen{UserID: id, At: at(1)}
			}
			return s.UpsertLastSeen(ctx(t), batch)
		},
		"UpsertLastSeen/zero time": func() error {
			return s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(200)}, {UserID: "z"}})
		},
		"LastSeen":    func() error { _, err := s.LastSeen(ctx(t), tooMany); return err },
		"Privacy":     func() error { _, err := s.Privacy(ctx(t), tooMany); return err },
		"SetContacts": func() error { return s.SetContacts(ctx(t), "a", tooMany) },
		"ContactOf":   func() error { _, err := s.ContactOf(ctx(t), tooMany, "c1"); return err },
		"SetMembers":  func() error { _, err := s.SetMembers(ctx(t), "conv", tooMany); return err },
	}
	for name, call := range lists {
		if err := call(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s(too many / zero time) = %v, want ErrInvalid", name, err)
		}
	}
	after := s.Stats()
	if after != before {
		t.Errorf("refused calls reached the database: stats %+v -> %+v", before, after)
	}
	wantTimes(t, s, map[string]time.Time{"a": at(1)}, "a", "n00000")
	wantContactOf(t, s, []string{"a"}, "c1", map[string]bool{"a": true})
	wantContactOf(t, s, []string{"a"}, "c2", map[string]bool{"a": false})
	wantMembers(t, s, "conv", "m1")
	p, err := s.Privacy(ctx(t), []string{"a"})
	must(t, err)
	if p["a"] != store.Nobody {
		t.Errorf("privacy = %v, want nobody", p["a"])
	}

	// The longest valid id and a full list are accepted.
	max128 := strings.Repeat("Az09_.:@-", 15)[:128]
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: max128, At: at(1)}}))
	wantTimes(t, s, map[string]time.Time{max128: at(1)}, max128)
	_, err = s.LastSeen(ctx(t), tooMany[:store.MaxIDs])
	must(t, err)
}

func testLargeReads(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	users := ids("big", 1000)
	batch := make([]store.LastSeen, len(users))
	for i, id := range users {
		batch[i] = store.LastSeen{UserID: id, At: at(i)}
	}
	must(t, s.UpsertLastSeen(ctx(t), batch))
	for i := 0; i < len(users); i += 3 {
		must(t, s.SetPrivacy(ctx(t), users[i], store.Contacts))
		must(t, s.SetContacts(ctx(t), users[i], []string{"viewer"}))
	}

	before := s.Stats()
	got, err := s.LastSeen(ctx(t), users)
	must(t, err)
	if len(got) != 1000 {
		t.Fatalf("LastSeen of 1000 ids returned %d", len(got))
	}
	for i, id := range users {
		if !got[id].Equal(at(i)) {
			t.Fatalf("LastSeen[%s] = %v, want %v", id, got[id], at(i))
		}
	}
	priv, err := s.Privacy(ctx(t), users)
	must(t, err)
	co, err := s.ContactOf(ctx(t), users, "viewer")
	must(t, err)
	if len(priv) != 1000 || len(co) != 1000 {
		t.Fatalf("Privacy/ContactOf of 1000 ids returned %d/%d entries", len(priv), len(co))
	}
	for i, id := range users {
		wantV, wantC := store.Everyone, false
		if i%3 == 0 {
			wantV, wantC = store.Contacts, true
		}
		if priv[id] != wantV || co[id] != wantC {
			t.Fatalf("%s: privacy %v contact %v, want %v %v", id, priv[id], co[id], wantV, wantC)
		}
	}
	if d := s.Stats().Queries - before.Queries; d != 3 {
		t.Errorf("three 1000-id reads took %d queries, want 3", d)
	}
}

func migrationFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	must(t, err)
	if len(names) == 0 {
		t.Fatal("migrations.FS holds no .sql file")
	}
	slices.Sort(names)
	return names
}

func testMigrateIdempotent(t *testing.T, b Backend) {
	where := b.NewDatabase(t)
	s1 := mustOpenAt(t, b, where, false)
	must(t, s1.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(1)}}))
	must(t, s1.Close())
	must(t, s1.Close()) // twice is harmless

	s2 := mustOpenAt(t, b, where, false) // migrates again: nothing to do
	applied, err := s2.Migrate(ctx(t))
	must(t, err)
	if len(applied) != 0 {
		t.Errorf("migrating a current schema applied %v", applied)
	}
	wantTimes(t, s2, map[string]time.Time{"a": at(1)}, "a")
}

func testConcurrentOpen(t *testing.T, b Backend) {
	where := b.NewDatabase(t)
	const n = 4
	stores := make([]Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = b.Open(context.Background(), where, false) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	if t.Failed() {
		return
	}
	for i, s := range stores {
		must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(i)}}))
	}
	wantTimes(t, stores[0], map[string]time.Time{"a": at(n - 1)}, "a")
}

func testConcurrentMigrate(t *testing.T, b Backend) {
	where := b.NewDatabase(t)
	const n = 4
	stores := make([]Store, n)
	for i := range stores {
		stores[i] = mustOpenAt(t, b, where, true)
	}
	applied := make([][]store.Migration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { applied[i], errs[i] = s.Migrate(context.Background()) })
	}
	wg.Wait()
	var versions []int64
	for i := range n {
		if errs[i] != nil {
			t.Errorf("migrate %d: %v", i, errs[i])
		}
		for _, m := range applied[i] {
			versions = append(versions, m.Version)
		}
	}
	slices.Sort(versions)
	if want := len(migrationFiles(t)); len(versions) != want || len(slices.Compact(versions)) != want {
		t.Errorf("4 concurrent migrators applied versions %v in all, want each of %d once", versions, want)
	}
	st, err := stores[0].MigrationStatus(ctx(t))
	must(t, err)
	for _, m := range st {
		if !m.Applied {
			t.Errorf("after migrating, %s is pending", m.Name)
		}
	}
}

func testMigrationStatus(t *testing.T, b Backend) {
	files := migrationFiles(t)
	s := mustOpenAt(t, b, b.NewDatabase(t), true)
	st, err := s.MigrationStatus(ctx(t))
	must(t, err)
	if len(st) != len(files) {
		t.Fatalf("status lists %d migrations, want %d: %+v", len(st), len(files), st)
	}
	for i, m := range st {
		if m.Name != files[i] || m.Applied || !m.AppliedAt.IsZero() {
			t.Errorf("fresh status[%d] = %+v, want %s pending", i, m, files[i])
		}
		if i > 0 && m.Version <= st[i-1].Version {
			t.Errorf("versions out of order: %+v", st)
		}
		if want := fmt.Sprintf("%05d_", m.Version); !strings.HasPrefix(m.Name, want) {
			t.Errorf("version %d does not match file %s", m.Version, m.Name)
		}
	}
	applied, err := s.Migrate(ctx(t))
	must(t, err)
	if len(applied) != len(files) {
		t.Errorf("Migrate applied %+v, want all %d", applied, len(files))
	}
	st, err = s.MigrationStatus(ctx(t))
	must(t, err)
	for i, m := range st {
		if !m.Applied || m.AppliedAt.IsZero() || m.Name != files[i] {
			t.Errorf("status[%d] after Migrate = %+v, want applied", i, m)
		}
	}
	must(t, s.Ping(ctx(t)))
}

func testUnavailable(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	must(t, s.Ping(ctx(t)))

	// A request whose context is already over never reaches the database.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.LastSeen(done, []string{"a"}); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("LastSeen(canceled ctx) = %v, want ErrUnavailable and context.Canceled", err)
	}
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if err := s.UpsertLastSeen(expired, []store.LastSeen{{UserID: "a", At: at(1)}}); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("UpsertLastSeen(expired ctx) = %v, want ErrUnavailable and DeadlineExceeded", err)
	}

	must(t, s.Close())
	calls := map[string]func() error{
		"Ping":           func() error { return s.Ping(ctx(t)) },
		"UpsertLastSeen": func() error { return s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(1)}}) },
		"LastSeen":       func() error { _, err := s.LastSeen(ctx(t), []string{"a"}); return err },
		"Privacy":        func() error { _, err := s.Privacy(ctx(t), []string{"a"}); return err },
		"SetPrivacy":     func() error { return s.SetPrivacy(ctx(t), "a", store.Nobody) },
		"SetContacts":    func() error { return s.SetContacts(ctx(t), "a", []string{"b"}) },
		"ContactOf":      func() error { _, err := s.ContactOf(ctx(t), []string{"a"}, "b"); return err },
		"SetMembers":     func() error { _, err := s.SetMembers(ctx(t), "c", []string{"a"}); return err },
		"IsMember":       func() error { _, err := s.IsMember(ctx(t), "c", "a"); return err },
		"Migrate":        func() error { _, err := s.Migrate(ctx(t)); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s on a closed store = %v, want ErrUnavailable", name, err)
		}
	}
	must(t, s.Close())
}

// testOnlineKeeper: the users listed online after the changes get the
// last alive moment as last-seen at recovery (a later stored time wins),
// the list is then empty; bad arguments change nothing.
func testOnlineKeeper(t *testing.T, b Backend) {
	s := MustOpen(t, b)
	k, ok := s.(store.OnlineKeeper)
	if !ok {
		t.Skip("not a store.OnlineKeeper (a wrapper; both stores are, by their declarations)")
	}
	if n, err := k.RecoverOnline(ctx(t)); err != nil || n != 0 {
		t.Fatalf("recover on a fresh store: %d %v", n, err)
	}
	must(t, k.KeepOnline(ctx(t), at(1), []string{"a", "b", "c"}, nil))
	must(t, k.KeepOnline(ctx(t), at(2), []string{"d", "a"}, []string{"b", "e"}))
	must(t, k.KeepOnline(ctx(t), time.Time{}, []string{"f"}, nil)) // listed; the alive moment stays at(2)
	must(t, s.UpsertLastSeen(ctx(t), []store.LastSeen{{UserID: "a", At: at(5)}, {UserID: "c", At: at(-5)}, {UserID: "b", At: at(1)}}))
	for _, bad := range []func() error{
		func() error { return k.KeepOnline(ctx(t), time.Unix(-1, 0), []string{"x"}, nil) },
		func() error { return k.KeepOnline(ctx(t), at(9), []string{"a b"}, nil) },
		func() error { return k.KeepOnline(ctx(t), at(9), nil, []string{""}) },
	} {
		if err := bad(); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bad KeepOnline: %v, want ErrInvalid", err)
		}
	}
	n, err := k.RecoverOnline(ctx(t))
	if err != nil || n != 4 {
		t.Fatalf("recover: %d %v, want 4 users (a, c, d, f)", n, err)
	}
	wantTimes(t, s, map[string]time.Time{"a": at(5), "b": at(1), "c": at(2), "d": at(2), "f": at(2)}, "a", "b", "c", "d", "e", "f", "x")
	if n, err := k.RecoverOnline(ctx(t)); err != nil || n != 0 {
		t.Fatalf("a second recovery: %d %v, want an empty list", n, err)
	}
}
