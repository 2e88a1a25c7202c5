package handlers

import (
	"errors"
	"fmt"
	"testing"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// A backend that fails is `unavailable` (REST 503) whichever package
// says so: the last-seen buffer's failure (its privacy versions on a
// Redis Cluster master that died) was `internal` (REST 500) until
// 2026-12-07 (failover audit).
func TestClassifyUnavailable(t *testing.T) {
	for _, err := range []error{presence.ErrUnavailable, store.ErrUnavailable, lastseen.ErrUnavailable} {
		wrapped := fmt.Errorf("lastseen: read privacy: %w", fmt.Errorf("privacy versions: %w", fmt.Errorf("lastseen: redis privacy versions: %w: %w", err, errors.New("dial tcp: refused"))))
		if e := classify(wrapped); e.Code != CodeUnavailable || HTTPStatus(e.Code) != 503 {
			t.Errorf("classify(%v) = %s (%d), want unavailable (503)", wrapped, e.Code, HTTPStatus(e.Code))
		}
	}
	if e := classify(errors.New("boom")); e.Code != CodeInternal {
		t.Errorf("classify(boom) = %s, want internal", e.Code)
	}
}
