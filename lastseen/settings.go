package lastseen

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// SettingStore reads users' last-seen settings; store.Store satisfies it.
type SettingStore interface {
	Privacy(ctx context.Context, userIDs []string) (map[string]store.Visibility, error)
}

// SettingsConfig configures Settings. Zero values mean the defaults.
type SettingsConfig struct {
	// MaxAge is how long a setting read from the store is used before it
	// is read again (default 1m). Changes made through PUT /v1/me/privacy
	// reach every node's cache at once (Set); MaxAge only bounds how long
	// a lost invalidation can last.
	MaxAge time.Duration
	// Wait bounds how long a lookup waits on the store (default 250ms):
	// room events and rosters must not stall on a slow database.
	Wait time.Duration
	// MaxEntries bounds the cache (default 100,000; expired entries, then
	// an arbitrary half, are dropped when full).
	MaxEntries int
	Now        func() time.Time // clock, time.Now
}

// Settings caches users' last-seen settings for the room events and
// rosters, which carry times only for users whose setting is everyone
// (CONTRACT §1). A lookup never waits on the store longer than Wait: a
// user whose setting is not known by then is left out (callers treat that
// as hidden), an expired entry is used as it is, and the read goes on in
// the background to fill the cache for the next lookup.
type Settings struct {
	store SettingStore
	cfg   SettingsConfig

	mu      sync.Mutex
	entries map[string]settingEntry
	loading map[string]chan struct{} // user → closed when its read ends
	seq     uint64                   // counts puts: a read older than a put does not undo it
	// next gathers the ids asked for while every reader is busy; the
	// first reader free reads them all in one statement. So a burst of
	// new users (a reconnect storm) costs a few large reads, not one read
	// per lookup queued on the store's connection pool, and an idle cache
	// adds no wait to a lookup.
	next    *settingBatch
	readers int // reads running (at most settingReaders)
}

// settingBatch is one read of the store: ids, and done closed when the
// read has ended.
type settingBatch struct {
	ids  []string
	done chan struct{}
}

// settingReaders bounds the store reads of Settings running at once; the
// lookups meanwhile join the next batch.
const settingReaders = 2

type settingEntry struct {
	v   store.Visibility
	at  time.Time
	seq uint64
}

// settingsReadTimeout bounds a background read of settings.
const settingsReadTimeout = 10 * time.Second

// NewSettings creates a Settings cache over s.
func NewSettings(s SettingStore, cfg SettingsConfig) *Settings {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = time.Minute
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 250 * time.Millisecond
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 100_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Settings{store: s, cfg: cfg, entries: map[string]settingEntry{}, loading: map[string]chan struct{}{}}
}

// Lookup returns the settings of userIDs that are known within Wait (or
// before ctx ends); the others are absent.
func (s *Settings) Lookup(ctx context.Context, userIDs []string) map[string]store.Visibility {
	out := make(map[string]store.Visibility, len(userIDs))
	now := s.cfg.Now()
	var need []string
	var waits []chan struct{}
	s.mu.Lock()
	for _, id := range userIDs {
		if _, done := out[id]; done {
			continue
		}
		e, ok := s.entries[id]
		if ok && now.Sub(e.at) < s.cfg.MaxAge {
			out[id] = e.v
			continue
		}
		if ch, busy := s.loading[id]; busy {
			waits = append(waits, ch)
			continue
		}
		need = append(need, id)
	}
	if len(need) > 0 {
		b := s.next
		if b == nil {
			b = &settingBatch{done: make(chan struct{})}
			s.next = b
		}
		b.ids = append(b.ids, need...)
		for _, id := range need {
			s.loading[id] = b.done
		}
		waits = append(waits, b.done)
		if s.readers < settingReaders {
			s.readers++
			s.next = nil
			go s.read(b, s.seq)
		}
	}
	s.mu.Unlock()
	if len(waits) == 0 {
		return out
	}
	timer := time.NewTimer(s.cfg.Wait)
	defer timer.Stop()
wait:
	for _, ch := range waits {
		select {
		case <-ch:
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	s.mu.Lock()
	for _, id := range userIDs {
		if _, done := out[id]; done {
			continue
		}
		if e, ok := s.entries[id]; ok {
			out[id] = e.v
		}
	}
	s.mu.Unlock()
	return out
}

// read is a reader: it reads batch b, then the batch gathered meanwhile,
// until none is waiting. startSeq is s.seq when b was taken.
func (s *Settings) read(b *settingBatch, startSeq uint64) {
	for b != nil {
		s.load(b, startSeq)
		s.mu.Lock()
		b, startSeq = s.next, s.seq
		s.next = nil
		if b == nil {
			s.readers--
		}
		s.mu.Unlock()
	}
}

// load reads a batch from the store (in statements of at most
// store.MaxIDs ids) and fills the cache, unless an entry was Set after the
// read began (that one is newer than what the store said).
func (s *Settings) load(b *settingBatch, startSeq uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), settingsReadTimeout)
	defer cancel()
	got := make(map[string]store.Visibility, len(b.ids))
	var err error
	for part := range slices.Chunk(b.ids, store.MaxIDs) {
		var vs map[string]store.Visibility
		if vs, err = s.store.Privacy(ctx, part); err != nil {
			break
		}
		maps.Copy(got, vs)
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range b.ids {
		if s.loading[id] == b.done {
			delete(s.loading, id)
		}
	}
	close(b.done)
	if err != nil {
		return // tried again at the next lookup
	}
	for _, id := range b.ids {
		v, ok := got[id]
		if !ok {
			v = store.DefaultVisibility
		}
		if e, ok := s.entries[id]; ok && e.seq > startSeq {
			continue
		}
		s.putLocked(id, v, now)
	}
}

// Set records a user's new setting (from PUT /v1/me/privacy on any node).
func (s *Settings) Set(userID string, v store.Visibility) {
	now := s.cfg.Now()
	s.mu.Lock()
	s.putLocked(userID, v, now)
	s.mu.Unlock()
}

func (s *Settings) putLocked(id string, v store.Visibility, now time.Time) {
	if _, ok := s.entries[id]; !ok && len(s.entries) >= s.cfg.MaxEntries {
		for k, e := range s.entries {
			if now.Sub(e.at) >= s.cfg.MaxAge {
				delete(s.entries, k)
			}
		}
		for k := range s.entries {
			if len(s.entries) < s.cfg.MaxEntries/2 {
				break
			}
			delete(s.entries, k)
		}
	}
	s.seq++
	s.entries[id] = settingEntry{v: v, at: now, seq: s.seq}
}

// RoomTime is the contract's `at` / `since` of a room event or roster
// entry (CONTRACT §1): the time rounded down to the minute when the user's
// setting is everyone, else nil (JSON null). A setting not known (known
// false) hides the time.
func RoomTime(t time.Time, v store.Visibility, known bool) *string {
	if !known || normalize(v) != store.Everyone || t.IsZero() {
		return nil
	}
	s := timestamp.Format(t.Truncate(time.Minute))
	return &s
}
