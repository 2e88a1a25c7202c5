// Package fakeclock is a time source that moves only when told: the tests'
// and the simulations' clock, safe for concurrent use.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable time source. The zero Clock reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock on by d and returns its new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}
