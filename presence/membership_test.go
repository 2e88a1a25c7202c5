package presence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/gate"
	"github.com/presenced/presenced/presence"
)

// memberStore answers from a set; its gate, when armed, holds the next
// read (after the set is read) until released.
type memberStore struct {
	mu      sync.Mutex
	members map[string]bool
	reads   int
	gate    gate.Gate
}

func (s *memberStore) IsMember(_ context.Context, conv, user string) (bool, error) {
	s.mu.Lock()
	s.reads++
	member := s.members[conv+"/"+user]
	s.mu.Unlock()
	s.gate.Pass()
	return member, nil
}

func (s *memberStore) set(key string, v bool) { s.mu.Lock(); s.members[key] = v; s.mu.Unlock() }

// A read that began before a Forget answers what it read, but its answer
// is not cached: the next check reads the store again.
func TestCachedMembershipForgetDuringRead(t *testing.T) {
	st := &memberStore{members: map[string]bool{"c/a": true}}
	entered, hold := st.gate.Arm()
	m := presence.NewCachedMembership(st, 0, 0)
	done := make(chan bool)
	go func() {
		ok, _ := m.IsMember(context.Background(), "c", "a")
		done <- ok
	}()
	<-entered
	st.set("c/a", false) // a removes a...
	m.Forget("c")        // ...and forgets, while the read is under way
	close(hold)
	if !<-done {
		t.Fatal("the read under way answers what it read")
	}
	ok, err := m.IsMember(context.Background(), "c", "a")
	if err != nil || ok {
		t.Fatalf("after Forget: member=%v err=%v; a stale answer was cached", ok, err)
	}
	// and ordinary answers are cached
	if _, err := m.IsMember(context.Background(), "c", "a"); err != nil {
		t.Fatal(err)
	}
	if st.reads != 2 {
		t.Fatalf("%d store reads, want 2", st.reads)
	}
}

// failingMembers answers from memberStore until down is set, then fails.
type failingMembers struct {
	memberStore
	down bool
}

var errStoreDown = errors.New("store down")

func (s *failingMembers) IsMember(ctx context.Context, conv, user string) (bool, error) {
	if s.down {
		return false, errStoreDown
	}
	return s.memberStore.IsMember(ctx, conv, user)
}

// While the store is down an answer it gave, expired, stands in for up to
// MembershipStaleIfDown: before, every join whose answer was over 5 s old
// was refused while PostgreSQL was down (a docs audit, 2026-12-07). An
// answer dropped by Forget, or never given, is not made up.
func TestCachedMembershipStaleWhileStoreDown(t *testing.T) {
	st := &failingMembers{memberStore: memberStore{members: map[string]bool{"c/a": true, "d/a": true}}}
	m := presence.NewCachedMembership(st, 5*time.Second, 0)
	now := time.Unix(1000, 0)
	presence.SetMembershipClock(m, func() time.Time { return now })
	ctx := context.Background()
	for _, conv := range []string{"c", "d"} {
		if ok, err := m.IsMember(ctx, conv, "a"); !ok || err != nil {
			t.Fatalf("%s: %v, %v", conv, ok, err)
		}
	}
	st.down = true
	m.Forget("d")
	now = now.Add(time.Minute)
	if ok, err := m.IsMember(ctx, "c", "a"); !ok || err != nil {
		t.Fatalf("a minute on, store down: %v, %v; want the answer it gave", ok, err)
	}
	for _, q := range [][2]string{{"d", "a"}, {"c", "b"}} {
		if _, err := m.IsMember(ctx, q[0], q[1]); !errors.Is(err, errStoreDown) {
			t.Errorf("%v, store down: %v; want its error (no answer to stand in)", q, err)
		}
	}
	now = now.Add(presence.MembershipStaleIfDown)
	if _, err := m.IsMember(ctx, "c", "a"); !errors.Is(err, errStoreDown) {
		t.Errorf("past MembershipStaleIfDown: %v; want the store's error", err)
	}
}

// ForgetAll drops the answers of every conversation (a node that may have
// missed changes made through other nodes).
func TestCachedMembershipForgetAll(t *testing.T) {
	s := &memberStore{members: map[string]bool{"c1/u": true, "c2/u": true}}
	c := presence.NewCachedMembership(s, time.Hour, 0)
	ctx := context.Background()
	for _, conv := range []string{"c1", "c2"} {
		if ok, err := c.IsMember(ctx, conv, "u"); !ok || err != nil {
			t.Fatalf("%s: %v %v", conv, ok, err)
		}
	}
	s.set("c1/u", false)
	s.set("c2/u", false)
	if ok, _ := c.IsMember(ctx, "c1", "u"); !ok {
		t.Fatal("not cached")
	}
	c.ForgetAll()
	for _, conv := range []string{"c1", "c2"} {
		if ok, err := c.IsMember(ctx, conv, "u"); ok || err != nil {
			t.Errorf("%s after ForgetAll: %v %v, want false", conv, ok, err)
		}
	}
}
