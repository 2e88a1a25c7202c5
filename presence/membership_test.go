package presence_test

import (
	"context"
	"sync"
	"testing"

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
