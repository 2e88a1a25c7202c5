//go:build race

// Package race tells whether the binary was built with the race detector,
// for tests whose measures it changes (allocation counts: it drops a share
// of what goes back into a sync.Pool; scale: it slows everything down).
package race

// Enabled reports that the race detector is on.
const Enabled = true
