//go:build race

package handlers

// raceEnabled: the race detector drops a share of what goes back into a
// sync.Pool, so allocation counts are not exact under it.
const raceEnabled = true
