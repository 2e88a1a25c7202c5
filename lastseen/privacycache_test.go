package lastseen_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// versionsKinds runs fn with a single node's versions and with versions on
// Redis shared by two readers (two nodes): newVersions returns the
// versions of one node; on Redis, every call returns versions on the same
// hash.
func versionsKinds(t *testing.T, fn func(t *testing.T, newVersions func() lastseen.PrivacyVersions)) {
	t.Run("local", func(t *testing.T) {
		v := lastseen.NewLocalVersions()
		fn(t, func() lastseen.PrivacyVersions { return v })
	})
	t.Run("redis", func(t *testing.T) {
		c := redisClient(t)
		prefix := "lsprivacy:" + randHex(6)
		t.Cleanup(func() { c.Del(context.Background(), lastseen.NewRedisVersions(c, prefix).Key()) })
		fn(t, func() lastseen.PrivacyVersions { return lastseen.NewRedisVersions(c, prefix) })
	})
}

// statusOf returns what the viewer sees of ids, as "id=status".
func statusOf(t *testing.T, r *lastseen.Reader, viewer string, ids []string) []string {
	t.Helper()
	ps, err := r.Presences(context.Background(), viewer, ids)
	must(t, err)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.UserID + "=" + p.Status
	}
	return out
}

// With Versions, the reader keeps the settings it read: once its buckets
// have versions, a query of the same users reads no setting from the
// store; a change saved and told (SettingChanged) on any node is seen by
// the next query on every node; a change not told stays unseen until the
// entry's maximum age.
func TestReaderKeepsSettingsWhileTheirVersionHolds(t *testing.T) {
	versionsKinds(t, func(t *testing.T, newVersions func() lastseen.PrivacyVersions) {
		ctx := context.Background()
		clk := newClock(t0)
		fs := newFakeStore()
		st := &wrapStore{Store: fs}
		status := &fakeStatus{}
		status.Set(presence.UserPresence{UserID: "u1", Status: presence.Online})
		reader := func() *lastseen.Reader {
			return lastseen.NewReader(lastseen.ReaderDeps{Status: status, Store: st, Now: clk.Now, Versions: newVersions()})
		}
		a, b := reader(), reader()
		ids := []string{"u1", "u2"}
		for i := range 200 {
			ids = append(ids, fmt.Sprintf("x%d", i))
		}
		// on Redis the first query creates the buckets' versions; the next
		// learns them, the one after fills the cache
		for range 3 {
			statusOf(t, a, "viewer", ids)
			statusOf(t, b, "viewer", ids)
		}
		st.resetCounts()
		if got := statusOf(t, a, "viewer", ids); got[0] != "u1=online" {
			t.Fatalf("u1 seen as %v", got[0])
		}
		statusOf(t, b, "viewer", ids)
		if n := st.privacy.Load(); n != 0 {
			t.Errorf("%d store privacy reads once the settings are held, want 0", n)
		}

		// u1 hides, through node b
		must(t, fs.SetPrivacy(ctx, "u1", store.Nobody))
		must(t, b.SettingChanged(ctx, "u1"))
		st.resetCounts()
		for _, r := range []*lastseen.Reader{a, b} {
			if got := statusOf(t, r, "viewer", ids); got[0] != "u1=hidden" {
				t.Errorf("after the change, u1 seen as %v", got[0])
			}
		}
		if n := st.privacy.Load(); n != 2 {
			t.Errorf("%d store privacy reads after one change, want 2 (one per node, for u1's bucket)", n)
		}
		st.resetCounts()
		statusOf(t, a, "viewer", ids)
		if n := st.privacy.Load(); n != 0 {
			t.Errorf("%d store privacy reads on the query after, want 0 (what was read again is kept)", n)
		}

		// the viewer's own setting is a setting like the others
		must(t, fs.SetPrivacy(ctx, "viewer", store.Nobody))
		must(t, a.SettingChanged(ctx, "viewer"))
		if got := statusOf(t, b, "viewer", []string{"u2"}); got[0] != "u2=hidden" {
			t.Errorf("the viewer hid: u2 seen as %v, want hidden (reciprocity)", got[0])
		}

		// a change saved but not told (its Changed failed): unseen until
		// the entry's maximum age
		must(t, fs.SetPrivacy(ctx, "viewer", store.Everyone))
		must(t, a.SettingChanged(ctx, "viewer"))
		statusOf(t, a, "viewer", ids) // the viewer's bucket read again
		if lastseen.PrivacyBucket("u2") == lastseen.PrivacyBucket("viewer") {
			t.Fatal("the test needs u2 and viewer in different buckets")
		}
		must(t, fs.SetPrivacy(ctx, "u2", store.Nobody))
		if got := statusOf(t, a, "viewer", []string{"u2"}); got[0] != "u2=offline" {
			t.Errorf("u2 seen as %v before its change is told or its entry ages", got[0])
		}
		clk.Advance(2 * time.Minute)
		if got := statusOf(t, a, "viewer", []string{"u2"}); got[0] != "u2=hidden" {
			t.Errorf("after the maximum age, u2 seen as %v, want hidden", got[0])
		}
	})
}

// A query on Redis with Versions still reads status, buffered last-seen
// and the settings' versions in one round trip once the versions exist.
func TestReaderVersionsInTheFactsRoundTrip(t *testing.T) {
	ctx := context.Background()
	hook := &countHook{}
	buf, c, prefix, eng := redisEngineEnv(t, hook)
	st := &wrapStore{Store: newFakeStore()}
	vers := lastseen.NewRedisVersions(c, prefix)
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: st, Versions: vers})
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("x%d", i)
	}
	for range 3 { // versions created, learnt, then the settings kept
		_, err := r.Presences(ctx, "viewer", ids)
		must(t, err)
	}
	if n, err := c.HLen(ctx, vers.Key()).Result(); err != nil || n != lastseen.PrivacyBuckets {
		t.Fatalf("versions hash has %d buckets (%v), want %d", n, err, lastseen.PrivacyBuckets)
	}
	hook.reset()
	st.resetCounts()
	_, err := r.Presences(ctx, "viewer", ids)
	must(t, err)
	if n := hook.n.Load(); n != 1 {
		t.Errorf("%d Redis round trips (%v), want 1", n, hook.names())
	}
	if n := st.privacy.Load(); n != 0 {
		t.Errorf("%d store privacy reads, want 0", n)
	}

	// Redis loses the versions (a restart without persistence): nothing
	// cached is trusted; the versions come back new
	must(t, st.SetPrivacy(ctx, "x1", store.Nobody)) // not told
	must(t, c.Del(ctx, vers.Key()).Err())
	st.resetCounts()
	ps, err := r.Presences(ctx, "viewer", ids)
	must(t, err)
	if ps[1].Status != "hidden" {
		t.Errorf("x1 seen as %q after the versions were lost, want hidden", ps[1].Status)
	}
	if n := st.privacy.Load(); n != 1 {
		t.Errorf("%d store privacy reads, want 1 (every held setting read again)", n)
	}
	if n, _ := c.HLen(ctx, vers.Key()).Result(); n != lastseen.PrivacyBuckets {
		t.Errorf("versions hash has %d buckets after the loss, want them created again", n)
	}
}

// racingStore changes a setting (saved, then told) right after a privacy
// read took its snapshot, once.
type racingStore struct {
	*wrapStore
	change func()
}

func (s *racingStore) Privacy(ctx context.Context, ids []string) (map[string]store.Visibility, error) {
	got, err := s.wrapStore.Privacy(ctx, ids)
	if s.change != nil {
		s.change()
		s.change = nil
	}
	return got, err
}

// A setting read from the store while a change to it is being saved is not
// kept: the query that raced the change may answer with either setting,
// the next one sees the new one.
func TestReaderDoesNotKeepASettingReadDuringItsChange(t *testing.T) {
	versionsKinds(t, func(t *testing.T, newVersions func() lastseen.PrivacyVersions) {
		ctx := context.Background()
		fs := newFakeStore()
		st := &racingStore{wrapStore: &wrapStore{Store: fs}}
		r := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Store: st, Versions: newVersions()})
		ids := []string{"u1", "u2"}
		statusOf(t, r, "viewer", ids) // versions known; u1 not held yet
		st.change = func() {
			must(t, fs.SetPrivacy(ctx, "u1", store.Nobody))
			must(t, r.SettingChanged(ctx, "u1"))
		}
		statusOf(t, r, "viewer", ids) // read u1 as everyone, then the change
		if got := statusOf(t, r, "viewer", ids); got[0] != "u1=hidden" {
			t.Errorf("after the change, u1 seen as %v, want hidden", got[0])
		}
	})
}

// The bucket of a user is FNV-1a (32 bits) of the id, modulo 64: every
// node must agree, whatever its build.
func TestPrivacyBucketIsFNV1a(t *testing.T) {
	for _, id := range []string{"", "u1", "viewer", "ünïcode", "a-much-longer-user-id-0123456789"} {
		h := fnv.New32a()
		_, _ = h.Write([]byte(id))
		if got, want := lastseen.PrivacyBucket(id), int(h.Sum32()%lastseen.PrivacyBuckets); got != want {
			t.Errorf("PrivacyBucket(%q) = %d, want %d", id, got, want)
		}
	}
}

// A status change's fan-out (PresencesFor) keeps the settings of the
// target and its viewers too, and sees a change told on another node.
func TestPresencesForKeepsSettingsWhileTheirVersionHolds(t *testing.T) {
	versionsKinds(t, func(t *testing.T, newVersions func() lastseen.PrivacyVersions) {
		ctx := context.Background()
		fs := newFakeStore()
		st := &wrapStore{Store: fs}
		a := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Store: st, Versions: newVersions()})
		b := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Store: st, Versions: newVersions()})
		up := presence.UserPresence{UserID: "u1", Status: presence.Online}
		viewers := []string{"v1", "v2", "v3"}
		fanout := func() []string {
			ps, err := a.PresencesFor(ctx, up, viewers)
			must(t, err)
			out := make([]string, len(ps))
			for i, p := range ps {
				out[i] = p.Status
			}
			return out
		}
		for range 3 { // versions created, learnt, settings kept
			fanout()
		}
		st.resetCounts()
		if got := fanout(); got[0] != "online" {
			t.Fatalf("v1 sees u1 as %v", got)
		}
		if n := st.privacy.Load(); n != 0 {
			t.Errorf("%d store privacy reads once the settings are held, want 0", n)
		}
		must(t, fs.SetPrivacy(ctx, "u1", store.Nobody))
		must(t, b.SettingChanged(ctx, "u1"))
		if got := fanout(); got[0] != "hidden" || got[2] != "hidden" {
			t.Errorf("after u1 hid (told on the other node), the viewers see %v, want hidden", got)
		}
	})
}
