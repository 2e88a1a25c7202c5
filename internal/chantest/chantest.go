// Package chantest is test support for waiting on a channel with a
// deadline. Import it only from _test files.
package chantest

import (
	"testing"
	"time"
)

// NoError waits up to within for the error done delivers, and fails tb if
// that error is not nil or does not come in time; what names the awaited
// thing in the failure.
func NoError(tb testing.TB, done <-chan error, within time.Duration, what string) {
	tb.Helper()
	select {
	case err := <-done:
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	case <-time.After(within):
		tb.Fatalf("%s: not done within %v", what, within)
	}
}
