package handlers

import (
	"context"
	"log/slog"
	"testing"

	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
)

// BenchmarkHeartbeatHandling measures presenced's own work for one
// heartbeat (decode, engine, ack body, metrics), without the library.
func BenchmarkHeartbeatHandling(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"})
	// a limit never reached: the limiter's cost is measured, not refusals
	high := Limit{Rate: 1e9, Burst: 1e9}
	h := NewSockets(SessionConfig{NodeID: "n1", Limits: EventLimits{Heartbeat: high}}, SocketDeps{Log: log, Metrics: metrics.New(), Engine: eng, Rooms: NewRooms(0, log)})
	c := &Conn{UserID: "u1", sid: "s1", ready: make(chan struct{})}
	close(c.ready)
	c.connected.Store(true)
	if err := eng.Connect(context.Background(), presence.Socket{ID: "s1", UserID: "u1"}); err != nil {
		b.Fatal(err)
	}
	fn := h.events()["heartbeat"]
	payload := map[string]any{"active": true}
	ack := func([]any, error) {}
	b.ReportAllocs()
	for b.Loop() {
		c.arrived(h.now())
		h.handle(c, "heartbeat", fn, []any{payload, ack})
	}
}
