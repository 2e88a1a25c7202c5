package lastseen_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/store"
)

// settingStore is a SettingStore whose reads can be held up.
type settingStore struct {
	mu    sync.Mutex
	v     map[string]store.Visibility
	reads int
	hold  chan struct{} // when set, reads wait for it to close
	fail  error
	// snapshot: a held read answers what the store held when it began
	snapshot bool
}

func (s *settingStore) Privacy(ctx context.Context, ids []string) (map[string]store.Visibility, error) {
	s.mu.Lock()
	s.reads++
	hold, fail := s.hold, s.fail
	var early map[string]store.Visibility
	if s.snapshot {
		early = visibilities(s.v, ids)
	}
	s.mu.Unlock()
	if early != nil {
		if hold != nil {
			<-hold
		}
		return early, nil
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return visibilities(s.v, ids), nil
}

func (s *settingStore) readCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.reads }

// heldSettings is a Settings waiting at most wait for a store that holds
// the settings v and whose reads wait until release is called.
func heldSettings(v map[string]store.Visibility, wait time.Duration) (st *settingStore, s *lastseen.Settings, release func()) {
	hold := make(chan struct{})
	st = &settingStore{v: v, hold: hold}
	return st, lastseen.NewSettings(st, lastseen.SettingsConfig{Wait: wait}), func() { close(hold) }
}

func TestRoomTime(t *testing.T) {
	at := time.Date(2026, 11, 30, 11, 47, 59, 999_000_000, time.UTC)
	cases := []struct {
		v     store.Visibility
		known bool
		at    time.Time
		want  *string
	}{
		{store.Everyone, true, at, str("2026-11-30T11:47:00.000Z")},
		{"", true, at, str("2026-11-30T11:47:00.000Z")}, // the default is everyone
		{store.Contacts, true, at, nil},
		{store.Nobody, true, at, nil},
		{"bogus", true, at, nil},         // an unknown value hides
		{store.Everyone, false, at, nil}, // not known in time: hidden
		{store.Everyone, true, time.Time{}, nil},
		{store.Everyone, true, at.In(time.FixedZone("x", 5*3600)), str("2026-11-30T11:47:00.000Z")},
	}
	for _, c := range cases {
		got := lastseen.RoomTime(c.at, c.v, c.known)
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("RoomTime(%v, %q, %v) = %v, want %v", c.at, c.v, c.known, deref(got), deref(c.want))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

func TestSettingsCachesAndExpires(t *testing.T) {
	st := &settingStore{v: map[string]store.Visibility{"n": store.Nobody}}
	var mu sync.Mutex
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := lastseen.NewSettings(st, lastseen.SettingsConfig{MaxAge: time.Minute, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }})
	ctx := context.Background()
	got := s.Lookup(ctx, []string{"n", "e", "n"})
	if got["n"] != store.Nobody || got["e"] != store.Everyone || len(got) != 2 {
		t.Fatalf("first lookup: %v", got)
	}
	s.Lookup(ctx, []string{"n", "e"})
	if st.readCount() != 1 {
		t.Fatalf("%d store reads for two lookups within MaxAge, want 1", st.readCount())
	}
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	st.mu.Lock()
	st.v["e"] = store.Contacts
	st.mu.Unlock()
	if got := s.Lookup(ctx, []string{"e"}); got["e"] != store.Contacts {
		t.Fatalf("after MaxAge: %v, want contacts", got)
	}
	// Set is seen at once. (It is called once the store has the new
	// setting, and reads it back: a store still holding the old one made
	// that read overwrite the Set now and then.)
	st.mu.Lock()
	st.v["e"] = store.Nobody
	st.mu.Unlock()
	s.Set("e", store.Nobody)
	if got := s.Lookup(ctx, []string{"e"}); got["e"] != store.Nobody {
		t.Fatalf("after Set: %v", got)
	}
}

// Prefetch starts the read of settings neither known nor being read and
// returns at once; a lookup then takes the read's answer without a read of
// its own, and a prefetch of what is known or being read reads nothing.
func TestSettingsPrefetch(t *testing.T) {
	st, s, release := heldSettings(map[string]store.Visibility{"n": store.Nobody}, 5*time.Second)
	start := time.Now()
	s.Prefetch([]string{"n", "e"})
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Prefetch waited %v on a held store", d)
	}
	for deadline := time.Now().Add(2 * time.Second); st.readCount() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Prefetch started no read")
		}
	}
	s.Prefetch([]string{"n"}) // being read: no second read
	release()
	got := s.Lookup(context.Background(), []string{"n", "e"})
	if got["n"] != store.Nobody || got["e"] != store.Everyone {
		t.Fatalf("after a prefetch: %v", got)
	}
	s.Prefetch([]string{"n", "e"}) // known
	if n := st.readCount(); n != 1 {
		t.Fatalf("%d store reads, want 1 (the prefetch's)", n)
	}
}

// The prefetches asked for while every prefetch read runs are read
// together, in one read after them, and a lookup of one of them waits for
// that read instead of reading.
func TestSettingsPrefetchGathers(t *testing.T) {
	st, s, release := heldSettings(map[string]store.Visibility{"b": store.Nobody, "d": store.Contacts}, 5*time.Second)
	for i, id := range []string{"a", "e"} { // each read starts before the next prefetch
		s.Prefetch([]string{id})
		for deadline := time.Now().Add(2 * time.Second); st.readCount() != i+1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d reads started by %d prefetches", st.readCount(), i+1)
			}
		}
	}
	before := runtime.NumGoroutine()
	for _, id := range []string{"b", "c", "d", "b"} {
		s.Prefetch([]string{id})
	}
	for i := range 100 {
		s.Prefetch([]string{fmt.Sprintf("u%d", i)})
	}
	// no goroutine per prefetch waits for the reads (there were 100 more)
	if n := runtime.NumGoroutine() - before; n > 5 {
		t.Fatalf("%d goroutines more for 103 prefetches gathered", n)
	}
	done := make(chan map[string]store.Visibility)
	go func() { done <- s.Lookup(context.Background(), []string{"d"}) }()
	time.Sleep(20 * time.Millisecond)
	if n := st.readCount(); n != 2 {
		t.Fatalf("%d store reads while the first two are held, want 2", n)
	}
	release()
	if got := <-done; got["d"] != store.Contacts {
		t.Fatalf("lookup of a gathered prefetch: %v", got)
	}
	got := s.Lookup(context.Background(), []string{"a", "b", "c", "d", "e"})
	if got["a"] != store.Everyone || got["b"] != store.Nobody || got["c"] != store.Everyone || got["d"] != store.Contacts || got["e"] != store.Everyone {
		t.Fatalf("after the prefetches: %v", got)
	}
	if n := st.readCount(); n != 3 {
		t.Fatalf("%d store reads, want 3 (the first two prefetches, then the others together)", n)
	}
}

// A slow store does not hold a lookup beyond Wait; the read goes on and
// fills the cache.
func TestSettingsLookupBoundedOnSlowStore(t *testing.T) {
	st, s, release := heldSettings(map[string]store.Visibility{"n": store.Nobody}, 50*time.Millisecond)
	start := time.Now()
	got := s.Lookup(context.Background(), []string{"n", "e"})
	if d := time.Since(start); d > time.Second {
		t.Fatalf("lookup took %v on a stalled store", d)
	}
	if len(got) != 0 {
		t.Fatalf("settings not read yet must be absent (hidden): %v", got)
	}
	// A second lookup meanwhile does not start another read.
	s.Lookup(context.Background(), []string{"n"})
	release()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got = s.Lookup(context.Background(), []string{"n", "e"})
		if len(got) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got["n"] != store.Nobody || got["e"] != store.Everyone {
		t.Fatalf("after the store answered: %v", got)
	}
	if st.readCount() != 1 {
		t.Fatalf("%d store reads, want 1", st.readCount())
	}
}

// A Set made while a read is under way is not undone by the read's older
// answer; a failed read leaves nothing behind.
func TestSettingsSetWinsOverOlderRead(t *testing.T) {
	st, s, release := heldSettings(map[string]store.Visibility{}, time.Millisecond)
	st.snapshot = true
	s.Lookup(context.Background(), []string{"u"}) // starts a read that says everyone
	st.mu.Lock()
	st.v["u"] = store.Nobody // the change is saved, then Set
	st.mu.Unlock()
	s.Set("u", store.Nobody)
	release()
	time.Sleep(50 * time.Millisecond)
	if got := s.Lookup(context.Background(), []string{"u"}); got["u"] != store.Nobody {
		t.Fatalf("an older read undid Set: %v", got)
	}
	if n := st.readCount(); n != 2 {
		t.Errorf("%d store reads, want 2 (the lookup's, and Set's)", n)
	}

	st2 := &settingStore{fail: errors.New("down")}
	s2 := lastseen.NewSettings(st2, lastseen.SettingsConfig{Wait: 100 * time.Millisecond})
	if got := s2.Lookup(context.Background(), []string{"u"}); len(got) != 0 {
		t.Fatalf("a failed read: %v", got)
	}
}

// Two opposite changes of one user made at once through two nodes reach
// a node in either order: the store has the last word, whatever Set came
// last.
func TestSettingsSetRereadsTheStore(t *testing.T) {
	st := &settingStore{v: map[string]store.Visibility{"u": store.Nobody}}
	s := lastseen.NewSettings(st, lastseen.SettingsConfig{})
	s.Set("u", store.Nobody)
	s.Set("u", store.Everyone) // the change the store did not keep, told last
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := s.Lookup(context.Background(), []string{"u"})
		if got["u"] == store.Nobody {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache kept %v; the store says nobody", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// While the store is slow, the lookups of new users gather into the next
// batch instead of queueing one read each on the store: 200 lookups of
// 200 different users cost at most the readers' first reads and one more
// each, and every user is known once the store answers.
func TestSettingsBatchesLookupsWhileReading(t *testing.T) {
	st, s, release := heldSettings(map[string]store.Visibility{"u7": store.Nobody}, 5*time.Second)
	var wg, started sync.WaitGroup
	results := make([]map[string]store.Visibility, 200)
	for i := range results {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			results[i] = s.Lookup(context.Background(), []string{fmt.Sprintf("u%d", i)})
		}()
	}
	// every lookup has asked (the first two started the readers, which
	// are held until release; the others joined the next batch)
	started.Wait()
	for deadline := time.Now().Add(2 * time.Second); st.readCount() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	release()
	wg.Wait()
	if n := st.readCount(); n > 4 {
		t.Fatalf("%d store reads for 200 lookups made while the store was slow, want at most 4", n)
	}
	for i, got := range results {
		id := fmt.Sprintf("u%d", i)
		want := store.Everyone
		if id == "u7" {
			want = store.Nobody
		}
		if v, ok := got[id]; !ok || v != want {
			t.Fatalf("lookup of %s: %v, want %s", id, got, want)
		}
	}
}

// A node that may have missed changes made through other nodes (Reload)
// reads every setting again: one it had cached is not used after it, nor
// is what a read that began before it found.
func TestSettingsReload(t *testing.T) {
	st := &settingStore{v: map[string]store.Visibility{"u": store.Everyone, "w": store.Everyone}}
	s := lastseen.NewSettings(st, lastseen.SettingsConfig{Wait: time.Second})
	if got := s.Lookup(context.Background(), []string{"u"}); got["u"] != store.Everyone {
		t.Fatalf("first lookup: %v", got)
	}
	st.mu.Lock()
	st.v["u"] = store.Nobody // changed through another node; its Set lost
	st.mu.Unlock()
	if got := s.Lookup(context.Background(), []string{"u"}); got["u"] != store.Everyone {
		t.Fatalf("cached: %v", got) // (within MaxAge)
	}
	s.Reload()
	if got := s.Lookup(context.Background(), []string{"u"}); got["u"] != store.Nobody {
		t.Fatalf("after Reload: %v, want nobody", got)
	}

	// a read under way when Reload comes does not fill the cache
	hold := make(chan struct{})
	st.mu.Lock()
	st.hold, st.snapshot = hold, true
	st.mu.Unlock()
	s2 := lastseen.NewSettings(st, lastseen.SettingsConfig{Wait: time.Millisecond})
	s2.Lookup(context.Background(), []string{"w"}) // its read says everyone
	st.mu.Lock()
	st.v["w"] = store.Nobody
	st.hold, st.snapshot = nil, false
	st.mu.Unlock()
	s2.Reload()
	close(hold)
	time.Sleep(50 * time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := s2.Lookup(context.Background(), []string{"w"})
		if v, ok := got["w"]; ok {
			if v != store.Nobody {
				t.Fatalf("a read older than Reload filled the cache: %v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("w never read again")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
