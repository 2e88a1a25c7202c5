package enginetest

import (
	"context"
	"sync"

	"github.com/presenced/presenced/presence"
)

// Statuses is a fake of an engine's user statuses for the tests of what
// reads them: a map of presences, in which a user absent is offline (as an
// engine answers for a user it does not know). The zero Statuses is empty
// and ready; it is safe for concurrent use.
type Statuses struct {
	mu sync.Mutex
	m  map[string]presence.UserPresence
}

// Set records up as its user's presence.
func (s *Statuses) Set(up presence.UserPresence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]presence.UserPresence{}
	}
	s.m[up.UserID] = up
}

// Users answers as an engine's Users: one presence per id, in order.
func (s *Statuses) Users(_ context.Context, ids []string) ([]presence.UserPresence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]presence.UserPresence, len(ids))
	for i, id := range ids {
		up, ok := s.m[id]
		if !ok {
			up = presence.UserPresence{UserID: id, Status: presence.Offline}
		}
		out[i] = up
	}
	return out, nil
}
