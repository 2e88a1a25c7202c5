package presence

import (
	"context"
	"time"
)

// Admission caps the sockets one user may have open across the cluster
// (CONTRACT §1: 20 by default). A handshake is admitted before the socket
// exists for the engine, so the place is reserved first and counted with
// the engine's own socket set:
//
//	Admit (handshake) → Engine.Connect with Socket.Reserved (the engine
//	counts the socket and ends the reservation in one step)
//
// Release ends the reservation of a socket that closed before Connect, or
// whose Connect failed.
// A reservation whose socket never connects (the client went away in
// between) lapses after ReservationTTL, so a place is never lost for good.
type Admission interface {
	// Admit reserves a place for socket sid of user unless the user already
	// has max sockets, connected or reserved; it reports whether it did.
	Admit(ctx context.Context, user, sid string, max int) (bool, error)
	// Release ends sid's reservation (idempotent).
	Release(ctx context.Context, user, sid string) error
}

// ReservationTTL is how long an admitted socket's place is held for it
// before the engine counts it.
const ReservationTTL = 30 * time.Second

// MemoryAdmission is the Admission of a Memory backend (single node).
type MemoryAdmission struct {
	m   *Memory
	now func() time.Time
}

var _ Admission = (*MemoryAdmission)(nil)

// NewMemoryAdmission counts the users' sockets of m. now defaults to time.Now.
func NewMemoryAdmission(m *Memory, now func() time.Time) *MemoryAdmission {
	if now == nil {
		now = time.Now
	}
	return &MemoryAdmission{m: m, now: now}
}

// Admit implements Admission.
func (a *MemoryAdmission) Admit(_ context.Context, user, sid string, max int) (bool, error) {
	now := a.now()
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	var live map[string]struct{}
	if u := a.m.users[user]; u != nil {
		live = u.socks
	}
	if _, ok := live[sid]; ok {
		return true, nil
	}
	res := a.m.reserved[user]
	n := len(live)
	for s, until := range res {
		if !until.After(now) {
			delete(res, s)
			continue
		}
		if _, counted := live[s]; !counted {
			n++
		}
	}
	if _, ok := res[sid]; ok {
		return true, nil
	}
	if n >= max {
		if len(res) == 0 {
			delete(a.m.reserved, user)
		}
		return false, nil
	}
	if res == nil {
		res = map[string]time.Time{}
		a.m.reserved[user] = res
	}
	res[sid] = now.Add(ReservationTTL)
	return true, nil
}

// Release implements Admission.
func (a *MemoryAdmission) Release(_ context.Context, user, sid string) error {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	a.m.release(user, sid)
	return nil
}

// release ends sid's reservation, if any. Called with m.mu held.
func (m *Memory) release(user, sid string) {
	if res := m.reserved[user]; res != nil {
		delete(res, sid)
		if len(res) == 0 {
			delete(m.reserved, user)
		}
	}
}
