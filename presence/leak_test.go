package presence_test

import (
	"testing"

	"github.com/presenced/presenced/internal/leakcheck"
)

// TestMain fails the package's tests if goroutines outlive them.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
