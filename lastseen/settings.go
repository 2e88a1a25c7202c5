package lastseen

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/presenced/presenced/internal/boundedmap"
	"github.com/presenced/presenced/internal/coalesce"
	"github.com/presenced/presenced/internal/stack"
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
	// MaxEntries bounds the cache (default 100,000; when full, expired
	// entries are dropped, and if that is not enough, arbitrary ones down
	// to half: boundedmap.MakeRoom).
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

	// reads shares the store reads: while settingReaders run, the ids
	// asked for join one next read. So a burst of new users (a reconnect
	// storm) costs a few large reads, not one read per lookup queued on
	// the store's connection pool, and an idle cache adds no wait.
	reads *coalesce.Reader[store.Visibility]

	mu      sync.Mutex
	entries map[string]settingEntry
	loading map[string]chan struct{} // user → closed when its read ends
	seq     uint64                   // counts puts: a read older than a put does not undo it
	// pre gathers the ids of the Prefetch calls for the next prefetch
	// read; prefetching counts the goroutines that run those reads, one
	// after another (prefetchLoop), at most settingReaders. So a burst of
	// handshakes costs a few goroutines and a read per round trip, not a
	// goroutine and a read (or a wait for one) per handshake. In the
	// connect benchmark (10,000 sockets at about 1,600/s) the reads' share
	// of the server's CPU fell from 5.6–7.0 % to 3.0 %, and copying
	// goroutine stacks from 7.0–8.6 % to 6.3 %; the join acks of the
	// heartbeat setup did not change beyond the noise (p50 12.5 and 14.1
	// against 14.0 and 15.9 ms, p99 142 and 142 against 114 and 138 ms).
	// Read back to back by one goroutine instead, those joins waited
	// longer (p99 173–276 ms).
	pre         *prefetchBatch
	prefetching int
	// floor is s.seq at the last Reload: a read that began before it does
	// not fill the cache.
	floor uint64
}

// prefetchBatch is the ids of the next prefetch read, done closed when it
// ends (their loading channel); seq is s.seq when the first was asked for.
type prefetchBatch struct {
	ids  []string
	done chan struct{}
	seq  uint64
}

// settingReaders bounds the store reads of Settings running at once.
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
	return &Settings{
		store:   s,
		cfg:     cfg,
		reads:   coalesce.New(s.Privacy, settingReaders, store.MaxIDs, settingsReadTimeout),
		entries: map[string]settingEntry{},
		loading: map[string]chan struct{}{},
	}
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
		waits = append(waits, s.startLoadLocked(need))
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

// Prefetch starts reading the settings of userIDs that are neither known
// nor being read, and returns at once: a socket's user is prefetched at its
// handshake, so that the rosters and room events that name the user soon
// after (a join right after connecting, the join's fan-out, the other
// members' joins) need not wait on the store. In a burst of 5,000 new
// users joining conversations of 100, a third of the joins' rosters
// waited on such reads, 15 ms at the median. The prefetches asked for
// while the prefetch reads run gather for the next (prefetchLoop).
func (s *Settings) Prefetch(userIDs []string) {
	now := s.cfg.Now()
	var need []string
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range userIDs {
		if e, ok := s.entries[id]; ok && now.Sub(e.at) < s.cfg.MaxAge {
			continue
		}
		if _, busy := s.loading[id]; !busy && !slices.Contains(need, id) {
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return
	}
	p := s.pre
	if p == nil {
		p = &prefetchBatch{done: make(chan struct{}), seq: s.seq}
		s.pre = p
	}
	for _, id := range need {
		s.loading[id] = p.done
	}
	p.ids = append(p.ids, need...)
	if s.prefetching < settingReaders {
		s.prefetching++
		go s.prefetchLoop()
	}
}

// prefetchLoop reads the gathered prefetches, a batch at a time, until
// none is left. At most settingReaders of them run.
func (s *Settings) prefetchLoop() {
	for {
		s.mu.Lock()
		p := s.pre
		s.pre = nil
		if p == nil {
			s.prefetching--
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.load(p.ids, p.done, p.seq)
	}
}

// startLoadLocked starts the read of ids, which no read is loading, and
// returns the channel closed when it ends. s.mu is held.
func (s *Settings) startLoadLocked(ids []string) chan struct{} {
	done := make(chan struct{})
	for _, id := range ids {
		s.loading[id] = done
	}
	go s.load(ids, done, s.seq)
	return done
}

// load reads ids from the store (shared with other lookups: reads) and
// fills the cache, unless an entry was Set after the lookup began (that
// one is newer than what the store said); done is closed at the end.
// startSeq is s.seq when the lookup began.
func (s *Settings) load(ids []string, done chan struct{}, startSeq uint64) {
	stack.Grow() // a new goroutine, into pgx
	ctx, cancel := context.WithTimeout(context.Background(), settingsReadTimeout)
	got, err := s.reads.Get(ctx, ids)
	cancel()
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.loading[id] == done {
			delete(s.loading, id)
		}
	}
	close(done)
	if err != nil {
		return // tried again at the next lookup
	}
	for _, id := range ids {
		v, ok := got[id]
		if !ok {
			v = store.DefaultVisibility
		}
		if e, ok := s.entries[id]; (ok && e.seq > startSeq) || startSeq < s.floor {
			continue
		}
		s.putLocked(id, v, now)
	}
}

// Set records a user's new setting (from PUT /v1/me/privacy on any node,
// once the store has it), and reads the setting from the store again: the
// store has the last word. Two changes of one user made at once through
// two nodes reach each node in either order, and a node that took the
// losing one last kept it until MaxAge (a black-box run: 6 of 12 pairs of
// opposite changes, each left one node showing a `nobody` user's times in
// room events for about a minute). The read begins after v is put, and
// what it finds replaces v unless a later Set came meanwhile.
func (s *Settings) Set(userID string, v store.Visibility) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(userID, v, now)
	done := make(chan struct{})
	s.loading[userID] = done
	go s.load([]string{userID}, done, s.seq)
}

func (s *Settings) putLocked(id string, v store.Visibility, now time.Time) {
	if _, ok := s.entries[id]; !ok {
		boundedmap.MakeRoom(s.entries, s.cfg.MaxEntries, 1, func(e settingEntry) bool { return now.Sub(e.at) >= s.cfg.MaxAge })
	}
	s.seq++
	s.entries[id] = settingEntry{v: v, at: now, seq: s.seq}
}

// Reload forgets every setting known: this node may have missed changes
// made through other nodes (their Set). Lookups read them again, and
// until a read is back within Wait they count as not known (hidden);
// reads already under way do not fill the cache.
func (s *Settings) Reload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.floor = s.seq
	clear(s.entries)
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
