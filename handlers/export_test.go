package handlers

import "time"

// SetLateConnectFirst sets the wait before a socket admitted with the
// engine's backend down is connected again (connectLater) and returns the
// function that restores it.
func SetLateConnectFirst(d time.Duration) (restore func()) {
	old := lateConnectFirst.Swap(int64(d))
	return func() { lateConnectFirst.Store(old) }
}

// SetResyncRetry sets the wait before a ResyncAfterGap that could not
// check every membership runs again, and returns the function that
// restores it.
func SetResyncRetry(d time.Duration) (restore func()) {
	old := resyncRetry.Swap(int64(d))
	return func() { resyncRetry.Store(old) }
}

// SetViewerSettle sets how long after a gap the subscriptions are shown
// as they are and lost typing stops told, and returns the function that
// restores it.
func SetViewerSettle(d time.Duration) (restore func()) {
	old := viewerSettle.Swap(int64(d))
	return func() { viewerSettle.Store(old) }
}

// SetLeaveConfirm sets how long after a gap's first roster read a member
// gone is checked again before the leave is made up for, and returns the
// function that restores it.
func SetLeaveConfirm(d time.Duration) (restore func()) {
	old := leaveConfirm.Swap(int64(d))
	return func() { leaveConfirm.Store(old) }
}
