package transport

import (
	"bytes"
	"encoding/json"
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
// Events wait in one queue. A worker leaves when it finishes while
// directSpare others wait for work, or after directIdle without work: the
// pool stays near the number of events in progress. A watcher adds a
// worker, at most one per directWait, while the queue is not empty and
// either nothing finished since its last look (the workers wait on a slow
// backend) or the queue grew. A short stall (a lock held a few
// milliseconds, a GC cycle, a busy CPU) so adds a few workers, not one per
// waiting socket: each goroutine that allocates during a GC cycle pays its
// share of the marking.
type directPool struct {
	jobs     chan *wsTransport
	workers  atomic.Int64
	waiting  atomic.Int64 // workers waiting for a job
	finished atomic.Int64 // jobs done
	inFlight atomic.Int64 // jobs queued or running
	watching atomic.Bool
	// inline: the starts (`["name"`) of the events run on their reader
	// instead (InlineEvents). In the heartbeat benchmark (server package,
	// 64 sockets, three runs alternated) a heartbeat took 9.9-11.2 µs on
	// the reader against 11.4-11.8 through the pool, the client's share
	// included. An inline event is not counted in inFlight: the connect
	// gate holds connects back for the pool's backlog only (real clients'
	// heartbeats, sparse, ran on their reader before too).
	inline [][]byte
}

const (
	directSpare = 32
	directIdle  = 10 * time.Second
	directWait  = 5 * time.Millisecond
	directQueue = 1 << 14 // beyond that, readers wait to enqueue
)

func newDirectPool(inline []string) *directPool {
	p := &directPool{jobs: make(chan *wsTransport, directQueue)}
	for _, name := range inline {
		start, _ := json.Marshal([]string{name})
		p.inline = append(p.inline, start[:len(start)-1])
	}
	return p
}

// inlines reports whether msg, a direct event ("42", an optional ack id,
// the JSON array), is one of the inline events: its name comes first,
// as the client's encoder writes it.
func (p *directPool) inlines(msg []byte) bool {
	if len(p.inline) == 0 {
		return false
	}
	i := 2
	for i < len(msg) && msg[i] >= '0' && msg[i] <= '9' {
		i++
	}
	for _, start := range p.inline {
		if bytes.HasPrefix(msg[i:], start) {
			return true
		}
	}
	return false
}

// run has a worker run w.readDirect(msg) and returns its result.
func (p *directPool) run(w *wsTransport, msg []byte) bool {
	w.job = msg
	for n := p.workers.Load(); n < directSpare; n = p.workers.Load() {
		if p.workers.CompareAndSwap(n, n+1) {
			go p.work()
			break
		}
	}
	if !p.watching.Load() && p.watching.CompareAndSwap(false, true) {
		go p.watch()
	}
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	p.jobs <- w
	return <-w.jobDone
}

func (p *directPool) work() {
	defer p.workers.Add(-1)
	idle := time.NewTimer(directIdle)
	defer idle.Stop()
	for {
		if p.waiting.Add(1) > directSpare { // enough wait already
			p.waiting.Add(-1)
			return
		}
		idle.Reset(directIdle)
		select {
		case w := <-p.jobs:
			p.waiting.Add(-1)
			w.jobDone <- w.runJob()
			p.finished.Add(1)
		case <-idle.C:
			p.waiting.Add(-1)
			return
		}
	}
}

// watch adds workers while the queue is stuck; it leaves after directIdle
// without work (run starts it again).
func (p *directPool) watch() {
	t := time.NewTicker(directWait)
	defer t.Stop()
	last, lastLen, quiet := p.finished.Load(), 0, 0
	for range t.C {
		n, done := len(p.jobs), p.finished.Load()
		if n > 0 && (done == last || n > lastLen) {
			p.workers.Add(1)
			go p.work()
		}
		if n == 0 && done == last {
			if quiet++; time.Duration(quiet)*directWait >= directIdle {
				p.watching.Store(false)
				return
			}
		} else {
			quiet = 0
		}
		last, lastLen = done, n
	}
}

// runJob runs the job the reader handed over (runDirect).
func (w *wsTransport) runJob() bool {
	msg := w.job
	w.job = nil
	return w.runDirect(msg)
}

// runDirect is readDirect. A panic (there is a recover in the handlers
// already) is reported as false: the event goes the library's way rather
// than stopping the goroutine that runs it (a pool worker, whose reader
// waits for it, or a sparse connection's reader).
func (w *wsTransport) runDirect(msg []byte) (done bool) {
	defer func() {
		if r := recover(); r != nil {
			done = false
		}
	}()
	return w.readDirect(msg)
}
