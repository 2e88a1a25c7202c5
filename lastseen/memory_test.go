package lastseen_test

import (
	"testing"

	"github.com/presenced/presenced/lastseen"
)

func TestMemoryBuffer(t *testing.T) {
	runBufferSuite(t, func(*testing.T) lastseen.Buffer { return lastseen.NewMemory() })
}
