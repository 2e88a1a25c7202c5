package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
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
// Below gcHeadroomFloor of live heap the tuner leaves GOGC at 100: a small
// heap costs little memory and a node handling bursts of events with a small
// heap keeps Go's default CPU. Above it, the headroom is the larger of the
// floor and pct % of the live heap, so the GC percent falls smoothly from 100
// to pct as the heap grows.
const gcHeadroomFloor = 32 << 20

// gcPercentFor is the GC percent that leaves max(floor, pct % of live) of
// headroom over a live heap of live bytes, never more than Go's default 100.
func gcPercentFor(live, floor uint64, pct int) int {
	if live <= floor {
		return 100
	}
	p := int(floor * 100 / live)
	return min(100, max(p, pct))
}

// gcTuner sets the GC percent after each collection from the live heap it
// found (startGCTuner makes one only when it is on).
type gcTuner struct {
	pct   int
	floor uint64

	mu      sync.Mutex
	last    int
	stopped bool
	sample  []metrics.Sample
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
	t := &gcTuner{pct: pct, floor: floor, last: 100,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.tune()
	t.arm()
	return t.stop, t.current()
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

// tune reads the live heap marked by the last collection and sets the GC
// percent it calls for, if that changed.
func (t *gcTuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := gcPercentFor(t.sample[0].Value.Uint64(), t.floor, t.pct)
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
		debug.SetGCPercent(100)
	}
}
