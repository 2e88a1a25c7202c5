package main

import (
	"fmt"
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
		{0, 32 * mib, 25, 800},         // nothing live yet: the most
		{2 * mib, 32 * mib, 25, 800},   // (Go's heap goal is then 32 MiB)
		{8 * mib, 32 * mib, 25, 400},   // below the floor, the floor is the headroom
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
	waitGOGCWhere(t, func(g uint64) bool { return g == want }, fmt.Sprint(want))
}

// waitGOGCWhere collects until the GC percent in force is ok, or fails
// after 10 s.
func waitGOGCWhere(t *testing.T, ok func(uint64) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(gogc()) {
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d, want %s", gogc(), want)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

var gcTestLive [][]byte

func TestGCTunerFollowsLiveHeap(t *testing.T) {
	runtime.GC()
	stop, p := startGCTuner(30, 8<<20, false)
	defer stop()
	if p <= 100 {
		t.Fatalf("started at %d with a live heap under the floor, want more than 100", p)
	}
	for range 64 { // 64 MiB live, 8 times the floor: pct applies
		gcTestLive = append(gcTestLive, make([]byte, 1<<20))
	}
	waitGOGC(t, 30)
	gcTestLive = nil
	waitGOGCWhere(t, func(g uint64) bool { return g > 100 }, "more than 100") // under the floor again

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

// TestGCTunerBurst: collections that find the live heap growing with what
// was allocated (two in a row) give Go's default percent; two flat ones,
// gcQuiet after the last growth, end the burst. A single growth (after a
// low, maybe) or churn without growth changes nothing.
func TestGCTunerBurst(t *testing.T) {
	const mib = 1 << 20
	tu := newGCTuner(25, 32*mib)
	clock := time.Unix(1000, 0)
	tu.now = func() time.Time { return clock }
	var live, allocs uint64 = 200 * mib, 1000 * mib
	step := func(what string, grow uint64, wantP int, wantEnded bool) {
		t.Helper()
		clock = clock.Add(300 * time.Millisecond) // between collections
		live, allocs = live+grow, allocs+50*mib
		if p, ended := tu.observe(live, allocs); p != wantP || ended != wantEnded {
			t.Fatalf("%s: percent %d, ended %v; want %d, %v", what, p, ended, wantP, wantEnded)
		}
	}
	step("the first look", 0, 25, false)
	step("churn", 0, 25, false)
	step("one growth", 10*mib, 25, false)
	step("flat", 0, 25, false)
	step("growth", 10*mib, 25, false)
	step("growth again: a burst", 10*mib, 100, false)
	step("2 MiB of 50 allocated stayed: growth", 2*mib, 100, false)
	step("flat once", 0, 100, false)
	step("growth", 10*mib, 100, false)
	step("flat", 0, 100, false)
	step("flat twice, 600 ms after the growth", 0, 100, false)
	step("900 ms", 0, 100, false)
	step("1.2 s: the burst ends", 0, 25, true)
	step("after it", 0, 25, false)

	// Between collections: a look with no collection since the last and
	// little allocated ends a burst; one after a collection does not.
	step("growth", 10*mib, 25, false)
	step("growth: a burst", 10*mib, 100, false)
	tu.seenCycles, tu.seenAllocs = 7, allocs
	if tu.idle(8, allocs+mib) {
		t.Error("a look after a collection ended the burst")
	}
	if tu.idle(8, allocs+100*mib) {
		t.Error("a look after 100 MiB allocated ended the burst")
	}
	if !tu.idle(8, allocs+101*mib) {
		t.Error("a look with no collection and 1 MiB allocated did not end the burst")
	}
	if tu.idle(8, allocs+101*mib) {
		t.Error("a look ended a burst already over")
	}
}

// TestGCTunerReleasesAfterBurst: a live heap growing through collections
// gives GOGC 100 until it stops; then the tight percent is set again and
// the memory freed is handed back.
func TestGCTunerReleasesAfterBurst(t *testing.T) {
	stop, _ := startGCTuner(30, 8<<20, false)
	defer func() {
		stop()
		gcTestLive = nil
		runtime.GC() // the next test starts with a small live heap
	}()
	for range 64 { // 64 MiB live: past the floor, pct applies
		gcTestLive = append(gcTestLive, make([]byte, 1<<20))
	}
	waitGOGC(t, 30)
	sawBurst := false
	for range 40 { // growing, collection after collection
		for range 4 {
			gcTestLive = append(gcTestLive, make([]byte, 1<<20))
		}
		runtime.GC()
		if gogc() == 100 {
			sawBurst = true
			break
		}
	}
	if !sawBurst {
		t.Fatal("GOGC never 100 while the live heap grew")
	}
	// Growth stops: the burst ends (the tuner's timer, or collections
	// finding the heap flat) and the tight percent comes back.
	waitGOGC(t, 30)
}
