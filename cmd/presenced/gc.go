package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The Go heap's headroom (PRESENCE_GC_HEADROOM).
//
// With Go's default GOGC=100 the heap grows to twice the live heap before a
// collection, and the runtime keeps what it freed (up to about 10 % over that
// goal) instead of giving it back to the OS. A presence node's live heap is
// mostly its connections' long-lived state, so its RSS settles at 2.2× that
// state or more: at 10,000 idle sockets, about 9.8 KB of live heap per
// socket gave 25–28 KiB of RSS per socket. Growing by a share of the live
// heap instead (GOGC=25: 16–17 KiB) costs collections: each collection
// marks the whole live heap, so its CPU per byte allocated grows as the
// headroom shrinks (docs/benchmarks/presence-load.md).
//
// The headroom is never less than gcHeadroomFloor: over a live heap above
// it, the larger of the floor and pct % of the live heap, so the GC percent
// falls smoothly from 100 to pct as the heap grows; over a smaller live heap,
// the floor too, so the percent rises above 100 (at most gcMaxPercent). A
// small node (a few thousand sockets, a live heap of 5-30 MiB) that answers
// big reads, such as presence:query of 1,000 ids (about 400 KB allocated
// each), collected every 40 or so such reads at Go's default 100 (16 MB
// live: a collection each 16 MB allocated), and a read
// that met a collection took 4-6 times as long (p99 6.7-7.3 ms against p50
// 1.75 ms; 3.8-4.0 ms at 400). The floor costs at most 32 MiB of memory.
const gcHeadroomFloor = 32 << 20

// gcMaxPercent bounds the percent over a small live heap. Go's heap goal
// is never below 4 MiB × GOGC/100, so 800 keeps it at 32 MiB when the live
// heap is under 4 MiB.
const gcMaxPercent = 800

// gcPercentFor is the GC percent that leaves max(floor, pct % of live) of
// headroom over a live heap of live bytes: over a heap above the floor never
// more than Go's default 100, over one below it at most gcMaxPercent.
func gcPercentFor(live, floor uint64, pct int) int {
	if live <= floor {
		return int(min(gcMaxPercent, floor*100/max(live, 1)))
	}
	p := int(floor * 100 / live)
	return min(100, max(p, pct))
}

// A connect burst (thousands of sockets arriving at once: a deploy, a
// reconnect storm) grows the live heap by each socket's state while it
// allocates several times that in garbage (the handshakes). With the tight
// headroom, collections come every floor's worth of allocation and each
// marks the whole live heap: marking costs several times what was allocated
// (measured: 16 % of the CPU per connect against GOGC=100).
//
// So while collections find that more than 1/gcGrowthShare of the bytes
// allocated since the one before stayed live (the live heap grows with the
// traffic, not only churns), two in a row to begin with, the tuner leaves
// Go's default 100. That share, unlike the growth per collection, does not
// depend on how far apart collections are, so the percent it sets does not
// make it flap. The burst ends at the second collection in a row that finds
// no such growth, gcQuiet or more after the last that did, or, between
// collections, when a gcQuiet passes with no collection and little
// allocation. The tuner then sets the tight percent again and hands the
// memory freed back to the OS at once (debug.FreeOSMemory), so that RSS
// after the burst is what the tight headroom gives. During a burst the heap
// may reach twice the live heap.
const (
	gcGrowthShare = 32
	gcQuiet       = time.Second
)

// gcTuner sets the GC percent after each collection from the live heap it
// found (startGCTuner makes one only when it is on).
type gcTuner struct {
	pct     int
	floor   uint64
	quiet   time.Duration
	release func() // hands freed memory to the OS: debug.FreeOSMemory

	mu       sync.Mutex
	last     int
	stopped  bool
	sample   []metrics.Sample // live heap, collections, bytes allocated
	prevLive uint64           // live heap found by the collection before
	prevAllc uint64           // bytes allocated until then
	burst    bool
	grewAt   time.Time // the last collection that found the heap growing
	grew     int       // collections in a row that found it growing
	flat     int       // collections since the last of them that did not
	now      func() time.Time
	timer    *time.Timer // while burst: looks for its end between collections
	// at the timer's last look
	seenCycles, seenAllocs uint64
}

// gcSentinel is allocated once per collection; its cleanup runs after the
// collection that found it unreachable. It holds a pointer so that it is not
// packed with other small objects by the tiny allocator, which would keep it
// alive.
type gcSentinel struct {
	_ *byte
	_ [8]byte
}

// startGCTuner starts the tuner unless pct is 0 or the environment sets
// GOGC (the operator's choice wins). It returns a stop function, and the
// percent in force once it started (0 when off).
func startGCTuner(pct int, floor uint64, gogcSet bool) (stop func(), percent int) {
	if pct <= 0 || gogcSet {
		return func() {}, 0
	}
	t := newGCTuner(pct, floor)
	t.tune()
	t.arm()
	return t.stop, t.current()
}

func newGCTuner(pct int, floor uint64) *gcTuner {
	return &gcTuner{pct: pct, floor: floor, last: 100, quiet: gcQuiet, release: debug.FreeOSMemory, now: time.Now,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"}}}
}

func (t *gcTuner) arm() {
	runtime.AddCleanup(&gcSentinel{}, func(t *gcTuner) {
		t.mu.Lock()
		stopped := t.stopped
		t.mu.Unlock()
		if stopped {
			return
		}
		t.tune()
		t.arm()
	}, t)
}

// read reads the runtime's figures: ok false if the live heap is not known.
func (t *gcTuner) read() (live, cycles, allocs uint64, ok bool) {
	metrics.Read(t.sample)
	for _, s := range t.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return 0, 0, 0, false
		}
	}
	return t.sample[0].Value.Uint64(), t.sample[1].Value.Uint64(), t.sample[2].Value.Uint64(), true
}

// tune reads the live heap marked by the last collection and sets the GC
// percent it calls for, if that changed.
func (t *gcTuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	live, cycles, allocs, ok := t.read()
	if !ok {
		return
	}
	was := t.burst
	p, ended := t.observe(live, allocs)
	t.set(p)
	switch {
	case t.burst && !was:
		t.seenCycles, t.seenAllocs = cycles, allocs
		t.timer = time.AfterFunc(t.quiet, t.look)
	case ended:
		t.timer.Stop()
		go t.release()
	}
}

// observe takes the live heap a collection found and the bytes allocated
// until then; it returns the GC percent to set and whether a burst ended
// with it.
func (t *gcTuner) observe(live, allocs uint64) (percent int, ended bool) {
	grew := t.prevAllc > 0 && live > t.prevLive && live-t.prevLive > (allocs-t.prevAllc)/gcGrowthShare
	t.prevLive, t.prevAllc = live, allocs
	p := gcPercentFor(live, t.floor, t.pct)
	now := t.now()
	switch {
	case grew:
		t.grew++
		t.grewAt, t.flat = now, 0
		// Two in a row: one may only follow a collection that came at
		// a low (what is live at a mark varies with what is under way).
		if p < 100 && (t.burst || t.grew >= 2) {
			t.burst = true
			return 100, false
		}
		return p, false
	case t.burst:
		// One collection may find the heap flat in the middle of a
		// burst: two in a row, and gcQuiet after the last growth, end
		// it.
		t.grew = 0
		if t.flat++; t.flat < 2 || now.Sub(t.grewAt) < t.quiet {
			return 100, false
		}
		t.burst = false
		return p, true
	}
	t.grew = 0
	return p, false
}

// idle takes the runtime's counts at a look of the timer; it reports
// whether the burst ended: no collection since the last look, and less
// than 1/16 of the live heap allocated (no collection would come soon to
// tell).
func (t *gcTuner) idle(cycles, allocs uint64) (ended bool) {
	quiet := cycles == t.seenCycles && allocs-t.seenAllocs < t.prevLive/16
	t.seenCycles, t.seenAllocs = cycles, allocs
	if t.burst && quiet {
		t.burst = false
		return true
	}
	return false
}

// look is the timer's look for a burst's end between collections.
func (t *gcTuner) look() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || !t.burst {
		return
	}
	_, cycles, allocs, ok := t.read()
	if ok && t.idle(cycles, allocs) {
		t.set(gcPercentFor(t.prevLive, t.floor, t.pct))
		go t.release()
		return
	}
	t.timer.Reset(t.quiet)
}

func (t *gcTuner) set(p int) {
	if p != t.last {
		debug.SetGCPercent(p)
		t.last = p
	}
}

func (t *gcTuner) current() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// stop puts GOGC back to 100 and ends the tuning at the next collection.
func (t *gcTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		if t.timer != nil {
			t.timer.Stop()
		}
		debug.SetGCPercent(100)
	}
}
