package handlers

import "time"

// SetLateConnectFirst sets the wait before a socket admitted with the
// engine's backend down is connected again (connectLater) and returns the
// function that restores it.
func SetLateConnectFirst(d time.Duration) (restore func()) {
	old := lateConnectFirst.Swap(int64(d))
	return func() { lateConnectFirst.Store(old) }
}
