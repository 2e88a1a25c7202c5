package main

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live  uint64
		floor uint64
		pct   int
		want  int
	}{
		{0, 32 * mib, 25, 100},
		{32 * mib, 32 * mib, 25, 100},  // at the floor: Go's default
		{40 * mib, 32 * mib, 25, 80},   // the floor is the headroom
		{64 * mib, 32 * mib, 25, 50},   //
		{128 * mib, 32 * mib, 25, 25},  // from here on, pct
		{1024 * mib, 32 * mib, 25, 25}, //
		{1024 * mib, 32 * mib, 60, 60},
		{20 * mib, 8 * mib, 100, 100}, // never above 100
	} {
		if got := gcPercentFor(c.live, c.floor, c.pct); got != c.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB, %d) = %d, want %d", c.live/mib, c.floor/mib, c.pct, got, c.want)
		}
	}
}

// gogc is the GC percent in force.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitGOGC collects until the tuner has set want, or fails after 10 s.
func waitGOGC(t *testing.T, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gogc() != want {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d, want %d", gogc(), want)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

var gcTestLive [][]byte

func TestGCTunerFollowsLiveHeap(t *testing.T) {
	stop, p := startGCTuner(30, 8<<20, false)
	defer stop()
	if p != 100 {
		t.Fatalf("started at %d with a small heap, want 100", p)
	}
	for range 64 { // 64 MiB live, 8 times the floor: pct applies
		gcTestLive = append(gcTestLive, make([]byte, 1<<20))
	}
	waitGOGC(t, 30)
	gcTestLive = nil
	waitGOGC(t, 100)

	stop()
	for range 64 {
		gcTestLive = append(gcTestLive, make([]byte, 1<<20))
	}
	defer func() { gcTestLive = nil }()
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	runtime.GC()
	if g := gogc(); g != 100 {
		t.Fatalf("GC percent %d after stop, want 100", g)
	}
}

func TestGCTunerOff(t *testing.T) {
	for _, c := range []struct {
		pct     int
		gogcSet bool
	}{{0, false}, {25, true}} {
		stop, p := startGCTuner(c.pct, 1, c.gogcSet)
		stop()
		if p != 0 {
			t.Errorf("startGCTuner(%d, gogcSet %v) = %d, want off", c.pct, c.gogcSet, p)
		}
	}
}
