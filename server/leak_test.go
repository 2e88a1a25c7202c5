package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if goroutines outlive them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The websocket transport's shared pool of direct-event workers
		// (transport/wspool.go) outlives the servers that used it: its
		// workers and its watcher leave by themselves after 10s without
		// work (directIdle), by design.
		goleak.IgnoreTopFunction("github.com/presenced/presenced/transport.(*directPool).work"),
		goleak.IgnoreTopFunction("github.com/presenced/presenced/transport.(*directPool).watch"),
	)
}
