package lastseen

import (
	"context"
	"sync"
	"time"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// Memory is the single-node Buffer: the same contract as Redis, in one
// process's memory. It is safe for concurrent use.
type Memory struct {
	mu      sync.Mutex
	times   map[string]int64 // user → last seen, ms
	dirty   map[string]struct{}
	claimed map[string]int64 // user → claim time, ms
}

var _ Buffer = (*Memory)(nil)

// NewMemory returns an empty in-memory buffer.
func NewMemory() *Memory {
	return &Memory{
		times:   map[string]int64{},
		dirty:   map[string]struct{}{},
		claimed: map[string]int64{},
	}
}

// Record implements Buffer.
func (m *Memory) Record(_ context.Context, entries []store.LastSeen) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		ms := timestamp.Millis(e.At)
		if old, ok := m.times[e.UserID]; ok && old >= ms {
			continue
		}
		m.times[e.UserID] = ms
		m.dirty[e.UserID] = struct{}{}
	}
	return nil
}

// Raise implements Buffer.
func (m *Memory) Raise(_ context.Context, entries []store.LastSeen) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		if old, ok := m.times[e.UserID]; ok {
			m.times[e.UserID] = max(old, timestamp.Millis(e.At))
		}
	}
	return nil
}

// Get implements Buffer.
func (m *Memory) Get(_ context.Context, userIDs []string) ([]time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]time.Time, len(userIDs))
	for i, id := range userIDs {
		if ms, ok := m.times[id]; ok {
			out[i] = timestamp.FromMillis(ms)
		}
	}
	return out, nil
}

// Claim implements Buffer.
func (m *Memory) Claim(_ context.Context, n int, now time.Time) (Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := Claim{At: timestamp.Millis(now)}
	for id := range m.dirty {
		if len(c.Entries) >= n {
			break
		}
		delete(m.dirty, id)
		ms, ok := m.times[id]
		if !ok {
			continue
		}
		m.claimed[id] = c.At
		c.Entries = append(c.Entries, store.LastSeen{UserID: id, At: timestamp.FromMillis(ms)})
	}
	return c, nil
}

// Ack implements Buffer.
func (m *Memory) Ack(_ context.Context, c Claim) error {
	m.unclaim(c, false)
	return nil
}

// Release implements Buffer.
func (m *Memory) Release(_ context.Context, c Claim) error {
	m.unclaim(c, true)
	return nil
}

// unclaim ends the claim c on its users (those not claimed again since);
// dirty makes every user of c dirty again.
func (m *Memory) unclaim(c Claim, dirty bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range c.Entries {
		if at, ok := m.claimed[e.UserID]; ok && at == c.At {
			delete(m.claimed, e.UserID)
		}
		if dirty {
			m.dirty[e.UserID] = struct{}{}
		}
	}
}

// Requeue implements Buffer.
func (m *Memory) Requeue(_ context.Context, cutoff time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	limit, n := timestamp.Millis(cutoff), 0
	for id, at := range m.claimed {
		if at < limit {
			delete(m.claimed, id)
			m.dirty[id] = struct{}{}
			n++
		}
	}
	return n, nil
}

// Trim implements Buffer.
func (m *Memory) Trim(_ context.Context, cutoff time.Time, limit int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	before, n := timestamp.Millis(cutoff), 0
	for id, ms := range m.times {
		if n >= limit {
			break
		}
		if ms >= before {
			continue
		}
		if _, ok := m.dirty[id]; ok {
			continue
		}
		if _, ok := m.claimed[id]; ok {
			continue
		}
		delete(m.times, id)
		n++
	}
	return n, nil
}

// Stats implements Buffer.
func (m *Memory) Stats(context.Context) (BufferStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return BufferStats{Users: int64(len(m.times)), Dirty: int64(len(m.dirty)), Claimed: int64(len(m.claimed))}, nil
}
