package server

import (
	"sync/atomic"
	"time"
)

// directPool runs the websockets' direct events (readDirect) on a few
// shared goroutines instead of each socket's reader. The work is the same
// and the reader still waits for it, so a socket's events keep their
// order and a slow handler holds up only its own socket. What changes is
// which goroutines allocate: the decoding, the handler and the ack allocate,
// and in Go each goroutine that allocates during a GC cycle must first do
// at least 64 KB of the cycle's marking. Ten thousand readers each paying
// that did a whole cycle's marking within half a second on a busy node,
// and the heartbeats of that second waited for it. A handful of workers
// pay it a handful of times; the GC's background workers do the rest at
// their own pace.
//
// When no worker is free, the event waits up to directWait for one, and
// then a new worker is started (a handler waiting on Redis keeps its
// worker; a short stall, such as a lock held for a few milliseconds, would
// otherwise start a worker per waiting socket). A worker that finishes while directSpare others wait for
// work leaves, and so does one without work for directIdle: the pool stays
// near the number of events in progress. (Receivers of a channel take
// turns, so an idle timeout alone would keep every worker ever started.)
type directPool struct {
	jobs    chan *wsTransport
	workers atomic.Int64
	waiting atomic.Int64 // workers waiting for a job
}

const (
	directSpare = 4
	directIdle  = 10 * time.Second
	directWait  = 2 * time.Millisecond
)

func newDirectPool() *directPool { return &directPool{jobs: make(chan *wsTransport)} }

// run has a worker run w.readDirect(msg) and returns its result.
func (p *directPool) run(w *wsTransport, msg []byte) bool {
	w.job = msg
	select {
	case p.jobs <- w:
	default:
		if p.workers.Load() >= directSpare {
			w.jobWait.Reset(directWait)
			select {
			case p.jobs <- w:
				w.jobWait.Stop()
				return <-w.jobDone
			case <-w.jobWait.C:
			}
		}
		p.workers.Add(1)
		go p.work(w)
	}
	return <-w.jobDone
}

func (p *directPool) work(w *wsTransport) {
	defer p.workers.Add(-1)
	idle := time.NewTimer(directIdle)
	defer idle.Stop()
	for {
		w.jobDone <- w.runJob()
		if p.waiting.Load() >= directSpare {
			return
		}
		idle.Reset(directIdle)
		p.waiting.Add(1)
		select {
		case w = <-p.jobs:
			p.waiting.Add(-1)
		case <-idle.C:
			p.waiting.Add(-1)
			return
		}
	}
}

// runJob runs the job; a panic (there is a recover in the handlers
// already) leaves the event to the library's path rather than stopping
// the worker with its reader waiting.
func (w *wsTransport) runJob() (done bool) {
	defer func() {
		if r := recover(); r != nil {
			done = false
		}
	}()
	msg := w.job
	w.job = nil
	return w.readDirect(msg)
}
