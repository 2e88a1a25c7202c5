package presence_test

import (
	"testing"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

func TestMemoryEngine(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) func(presence.Config) presence.Engine {
		m := presence.NewMemory()
		return func(cfg presence.Config) presence.Engine { return presence.NewMemoryEngine(m, cfg) }
	})
}
