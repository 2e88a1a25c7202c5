// Package gate holds a call under test at one point until the test lets it
// go: the test arms the gate, the code under test (a fake's method) passes
// it, and the test sees the call arrive, acts, then releases it. Import it
// only from _test files.
package gate

import "sync"

// Gate holds the first Pass after each Arm; the zero Gate is open.
type Gate struct {
	mu      sync.Mutex
	entered chan struct{}
	release chan struct{}
}

// Arm makes the next Pass wait: entered is closed when that Pass arrives,
// and the Pass returns once the test closes release.
func (g *Gate) Arm() (entered, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	return g.entered, g.release
}

// Pass waits at the gate if it is armed (and disarms it); otherwise it
// returns at once.
func (g *Gate) Pass() {
	g.mu.Lock()
	entered, release := g.entered, g.release
	g.entered, g.release = nil, nil
	g.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
}
