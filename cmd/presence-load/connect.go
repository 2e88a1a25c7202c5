//go:build linux

package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fleetSpec describes sockets to open: socket i connects as user(i) to
// addr(i) and joins convs(i).
type fleetSpec struct {
	count   int
	rate    int // new sockets per second
	addr    func(i int) (string, int)
	user    func(i int) string
	convs   func(i int) []string
	onEvent func(i int) eventFunc
}

type fleetStats struct {
	connect  hist // websocket + Socket.IO CONNECT + session event
	join     hist // conversation:join acks
	failed   atomic.Int64
	joinFail atomic.Int64
	mu       sync.Mutex
	errs     map[string]int
	elapsed  time.Duration
}

func (s *fleetStats) fail(msg string) {
	s.mu.Lock()
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	if len(msg) > 160 {
		msg = msg[:160]
	}
	s.errs[msg]++
	s.mu.Unlock()
}

func (s *fleetStats) errorSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for i, e := range largestFirst(s.errs) {
		if i == 5 {
			break
		}
		out += fmt.Sprintf("\n    %d× %s", e.v, e.k)
	}
	return out
}

// openFleet opens the sockets at the given rate (at most -inflight sockets
// in their handshake and joins at once) and joins their conversations.
// Failed sockets are nil. The sockets are dropped once the nodes are
// stopped (see dropFleet).
func openFleet(ctx context.Context, e *env, spec fleetSpec, st *fleetStats) []*conn {
	conns := make([]*conn, spec.count)
	sem := make(chan struct{}, max(1, e.opt.inflight))
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Second / time.Duration(max(1, spec.rate))
	tokens := make([]string, spec.count)
	for i := range tokens {
		tokens[i] = e.token(spec.user(i))
	}
	var opened atomic.Int64
	stopProgress := make(chan struct{})
	defer close(stopProgress)
	if e.opt.tty && !e.opt.verbose {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					e.opt.progress("%d/%d sockets connected and joined, %d failed", opened.Load(), spec.count, st.failed.Load())
				case <-stopProgress:
					return
				}
			}
		}()
	}
	for i := 0; i < spec.count; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			addr, nodeIdx := spec.addr(i)
			var onEvent eventFunc
			if spec.onEvent != nil {
				onEvent = spec.onEvent(i)
			}
			t0 := time.Now()
			c, err := dialSocket(cctx, addr, spec.user(i), tokens[i], nodeIdx, onEvent)
			if err != nil {
				st.failed.Add(1)
				st.fail("connect: " + err.Error())
				return
			}
			st.connect.record(time.Since(t0))
			if spec.convs != nil {
				for _, conv := range spec.convs(i) {
					ack, rtt, err := c.call(cctx, "conversation:join", map[string]string{"conversationId": conv})
					if err != nil {
						st.joinFail.Add(1)
						st.fail("join: " + err.Error())
						continue
					}
					st.join.record(rtt)
					if !ackOK(ack) {
						st.joinFail.Add(1)
						st.fail("join ack: " + clip(ack))
					}
				}
			}
			conns[i] = c
			opened.Add(1)
		}(i)
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	e.afterStop = append(e.afterStop, func() { dropFleet(conns) })
	return conns
}

// openFleetOn is openFleet to node n, with n's CPU sampled before and after.
func openFleetOn(ctx context.Context, e *env, n *node, spec fleetSpec, st *fleetStats) (conns []*conn, before, after cpuSnap) {
	before = e.cpu(n.pid)
	conns = openFleet(ctx, e, spec, st)
	return conns, before, e.cpu(n.pid)
}

// connected returns the sockets that connected (openFleet's non-nil ones).
func connected(conns []*conn) []*conn {
	var live []*conn
	for _, c := range conns {
		if c != nil {
			live = append(live, c)
		}
	}
	return live
}

// dropFleet closes the sockets' connections without a goodbye (used once
// the servers are stopped).
func dropFleet(conns []*conn) {
	for _, c := range conns {
		if c != nil {
			c.closing.Store(true)
			_ = c.ws.Close()
		}
	}
}

// lost counts the sockets closed by the other side (not by the tool), with
// the reasons seen.
func lost(conns []*conn) (int, string) {
	n := 0
	why := map[string]int{}
	for _, c := range conns {
		if c == nil {
			continue
		}
		select {
		case <-c.done:
			if !c.closing.Load() {
				n++
				k := fmt.Sprint(c.closeErr)
				if c.pings > 0 {
					k += fmt.Sprintf(" [%d pings answered; closed %s after the last ping, whose pong was written %s after it]",
						c.pings, c.closedAt.Sub(c.lastPing).Round(10*time.Millisecond), ms(c.lastPong.Sub(c.lastPing)))
				} else {
					k += " [no ping received]"
				}
				why[k]++
			}
		default:
		}
	}
	var parts []string
	for k, v := range why {
		parts = append(parts, fmt.Sprintf("%d× %s", v, k))
	}
	sort.Strings(parts)
	if len(parts) > 5 {
		parts = append(parts[:5], fmt.Sprintf("… %d more", len(parts)-5))
	}
	return n, strings.Join(parts, "; ")
}
