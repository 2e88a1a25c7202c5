package lastseen_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/store/storetest"
)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- Redis ----

// redisClient returns a client of the test Redis (see redistest.Options)
// with hooks, closed when tb ends.
func redisClient(tb testing.TB, hooks ...redis.Hook) *redis.Client {
	tb.Helper()
	c := redistest.Client(tb)
	for _, h := range hooks {
		c.AddHook(h)
	}
	return c
}

// redisBuffer returns a Redis buffer under a prefix of its own, whose keys
// are deleted when tb ends.
func redisBuffer(tb testing.TB, hooks ...redis.Hook) (*lastseen.Redis, *redis.Client) {
	tb.Helper()
	c := redisClient(tb, hooks...)
	return redisBufferAt(tb, c, "lstest:"+randHex(6)), c
}

func redisBufferAt(tb testing.TB, c *redis.Client, prefix string) *lastseen.Redis {
	b := lastseen.NewRedis(c, lastseen.RedisConfig{Prefix: prefix})
	tb.Cleanup(func() {
		t, d, cl := b.Keys()
		c := redis.NewClient(redistest.Options(tb))
		defer c.Close()
		c.Del(context.Background(), t, d, cl, b.EpochKey())
	})
	return b
}

// countHook counts the round trips of a client: one per command or
// pipeline sent.
type countHook struct {
	n    atomic.Int64
	mu   sync.Mutex
	cmds []string
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		h.mu.Lock()
		h.cmds = append(h.cmds, "pipeline")
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *countHook) reset() {
	h.n.Store(0)
	h.mu.Lock()
	h.cmds = nil
	h.mu.Unlock()
}

func (h *countHook) names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.cmds)
}

// ---- PostgreSQL ----

// pgDatabase creates a fresh database, dropped when tb ends, and returns
// its URL.
func pgDatabase(tb testing.TB) string {
	tb.Helper()
	return storetest.FreshPostgres(tb, "presenced_lastseen")
}

// pgStore opens the real PostgreSQL store on a fresh database.
func pgStore(tb testing.TB) *store.Postgres {
	tb.Helper()
	where := pgDatabase(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.OpenPostgres(ctx, where, store.PostgresConfig{})
	if err != nil {
		tb.Fatalf("open postgres: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// ---- stores ----

// fakeStore is an in-memory store.Store with the real one's semantics for
// what this package uses (later-wins upsert, default privacy).
type fakeStore struct {
	mu       sync.Mutex
	seen     map[string]time.Time
	privacy  map[string]store.Visibility
	contacts map[string]map[string]bool // owner → contact → true
}

func newFakeStore() *fakeStore {
	return &fakeStore{seen: map[string]time.Time{}, privacy: map[string]store.Visibility{}, contacts: map[string]map[string]bool{}}
}

var _ store.Store = (*fakeStore)(nil)

func (f *fakeStore) UpsertLastSeen(ctx context.Context, batch []store.LastSeen) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(batch) > store.MaxIDs {
		return store.ErrInvalid
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ls := range batch {
		at := ls.At.Truncate(time.Millisecond).UTC()
		if at.After(f.seen[ls.UserID]) {
			f.seen[ls.UserID] = at
		}
	}
	return nil
}

func (f *fakeStore) LastSeen(_ context.Context, ids []string) (map[string]time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]time.Time{}
	for _, id := range ids {
		if t, ok := f.seen[id]; ok {
			out[id] = t
		}
	}
	return out, nil
}

func (f *fakeStore) Privacy(_ context.Context, ids []string) (map[string]store.Visibility, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return visibilities(f.privacy, ids), nil
}

// visibilities is a fake store's Privacy answer: each id's setting in
// set, else the default.
func visibilities(set map[string]store.Visibility, ids []string) map[string]store.Visibility {
	out := map[string]store.Visibility{}
	for _, id := range ids {
		v, ok := set[id]
		if !ok {
			v = store.DefaultVisibility
		}
		out[id] = v
	}
	return out
}

func (f *fakeStore) SetPrivacy(_ context.Context, id string, v store.Visibility) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.privacy[id] = v
	return nil
}

func (f *fakeStore) SetContacts(_ context.Context, owner string, contacts []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]bool{}
	for _, c := range contacts {
		m[c] = true
	}
	f.contacts[owner] = m
	return nil
}

func (f *fakeStore) ContactOf(_ context.Context, owners []string, viewer string) (map[string]bool, error) {
	return f.pairs(owners, func(o string) bool { return f.contacts[o][viewer] }), nil
}

func (f *fakeStore) ContactsAmong(_ context.Context, owner string, candidates []string) (map[string]bool, error) {
	return f.pairs(candidates, func(c string) bool { return f.contacts[owner][c] }), nil
}

// pairs answers paired(id) for each id of list, under the lock.
func (f *fakeStore) pairs(list []string, paired func(id string) bool) map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for _, id := range list {
		out[id] = paired(id)
	}
	return out
}

func (f *fakeStore) SetMembers(context.Context, string, []string) ([]string, error) { return nil, nil }
func (f *fakeStore) IsMember(context.Context, string, string) (bool, error)         { return false, nil }
func (f *fakeStore) Members(context.Context, string) ([]string, error)              { return nil, nil }
func (f *fakeStore) Ping(context.Context) error                                     { return nil }
func (f *fakeStore) Close() error                                                   { return nil }

// wrapStore counts the calls this package makes and can fail upserts.
type wrapStore struct {
	store.Store
	upserts, lastSeen, privacy, contactOf, contactsAmong atomic.Int64
	// failNext upserts fail while it is positive (decremented per failure).
	failNext atomic.Int64
	// failOn, when set, fails the upsert calls for which it returns true
	// (1-based call number).
	failOn func(call int64) bool
	// lastSeenIDs are the ids of the last LastSeen call.
	mu          sync.Mutex
	lastSeenIDs []string
}

var errInjected = errors.New("injected store failure")

func (w *wrapStore) UpsertLastSeen(ctx context.Context, batch []store.LastSeen) error {
	n := w.upserts.Add(1)
	if w.failNext.Load() > 0 && w.failNext.Add(-1) >= 0 {
		return errors.Join(store.ErrUnavailable, errInjected)
	}
	if w.failOn != nil && w.failOn(n) {
		return errors.Join(store.ErrUnavailable, errInjected)
	}
	return w.Store.UpsertLastSeen(ctx, batch)
}

func (w *wrapStore) LastSeen(ctx context.Context, ids []string) (map[string]time.Time, error) {
	w.lastSeen.Add(1)
	w.mu.Lock()
	w.lastSeenIDs = slices.Clone(ids)
	w.mu.Unlock()
	return w.Store.LastSeen(ctx, ids)
}

func (w *wrapStore) Privacy(ctx context.Context, ids []string) (map[string]store.Visibility, error) {
	w.privacy.Add(1)
	return w.Store.Privacy(ctx, ids)
}

func (w *wrapStore) ContactsAmong(ctx context.Context, owner string, candidates []string) (map[string]bool, error) {
	w.contactsAmong.Add(1)
	return w.Store.ContactsAmong(ctx, owner, candidates)
}

func (w *wrapStore) ContactOf(ctx context.Context, owners []string, viewer string) (map[string]bool, error) {
	w.contactOf.Add(1)
	return w.Store.ContactOf(ctx, owners, viewer)
}

func (w *wrapStore) resetCounts() {
	w.upserts.Store(0)
	w.lastSeen.Store(0)
	w.privacy.Store(0)
	w.contactOf.Store(0)
	w.contactsAmong.Store(0)
}

// stores runs fn against the fake store and, when reachable, PostgreSQL.
func stores(t *testing.T, fn func(t *testing.T, newStore func(t *testing.T) store.Store)) {
	t.Run("fake", func(t *testing.T) {
		fn(t, func(*testing.T) store.Store { return newFakeStore() })
	})
	t.Run("postgres", func(t *testing.T) {
		storetest.PostgresAdmin(t)
		fn(t, func(t *testing.T) store.Store { return pgStore(t) })
	})
}

// buffers runs fn against a memory and a Redis buffer.
func buffers(t *testing.T, fn func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer)) {
	t.Run("memory", func(t *testing.T) {
		fn(t, func(*testing.T) lastseen.Buffer { return lastseen.NewMemory() })
	})
	t.Run("redis", func(t *testing.T) {
		redisClient(t)
		fn(t, func(t *testing.T) lastseen.Buffer { b, _ := redisBuffer(t); return b })
	})
}

// ---- clock and status ----

type clock = fakeclock.Clock

func newClock(t time.Time) *clock { return fakeclock.New(t) }

// fakeStatus is a StatusReader over enginetest.Statuses (users absent are
// offline and unknown to the engine) that counts its calls.
type fakeStatus struct {
	enginetest.Statuses
	calls atomic.Int64
}

func (f *fakeStatus) Users(ctx context.Context, ids []string) ([]presence.UserPresence, error) {
	f.calls.Add(1)
	return f.Statuses.Users(ctx, ids)
}

// t0 is the reference instant of the tests, with milliseconds.
var t0 = time.Date(2026, 11, 30, 11, 0, 0, 123_000_000, time.UTC)

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func storedTimes(tb testing.TB, s store.Store, ids []string) map[string]time.Time {
	tb.Helper()
	m, err := s.LastSeen(context.Background(), ids)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// redisEngineEnv is a Redis buffer and a Redis engine (node n1) on the test
// Redis under a fresh prefix, whose keys are deleted when tb ends.
func redisEngineEnv(tb testing.TB, hooks ...redis.Hook) (*lastseen.Redis, *redis.Client, string, *presence.RedisEngine) {
	tb.Helper()
	buf, c := redisBuffer(tb, hooks...)
	prefix := "lsreader:" + randHex(6)
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return buf, c, prefix, presence.NewRedisEngine(c, presence.Config{NodeID: "n1"}, presence.RedisConfig{Prefix: prefix})
}
