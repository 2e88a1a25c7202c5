// Package leakcheck is test support: it fails a package's tests if
// goroutines outlive them. Import it only from _test files (it imports
// testing and goleak).
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// ignores are goroutines that outlive tests by design.
var ignores = []goleak.Option{
	// The websocket transport's shared pool of direct-event workers
	// (transport/wspool.go) outlives the servers that used it: its
	// workers and its watcher leave by themselves after 10s without
	// work (directIdle), by design.
	goleak.IgnoreTopFunction("github.com/presenced/presenced/transport.(*directPool).work"),
	goleak.IgnoreTopFunction("github.com/presenced/presenced/transport.(*directPool).watch"),
	// the process-wide epoll loop of parked websocket readers
	goleak.IgnoreAnyFunction("github.com/presenced/presenced/transport.(*poller).loop"),
	goleak.IgnoreTopFunction("github.com/presenced/presenced/transport.(*poller).reader"),
}

// VerifyTestMain runs the package's tests, then fails them if goroutines
// other than the ignored ones are still running. Call it from TestMain.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m, ignores...)
}
