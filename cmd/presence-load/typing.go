//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// typingSent is when a typing change of a user in a conversation was
// written, and from which node's socket.
type typingSent struct {
	at   time.Time
	node int
	seq  uint64
}

// typingKey names a typing change: conversation, user, start or stop.
type typingKey struct {
	conv, user string
	typing     bool
}

type typingStats struct {
	mu        sync.Mutex
	sent      map[typingKey]typingSent
	all       hist
	same      hist // receiver on the sender's node
	cross     hist // receiver on another node
	delivered atomic.Int64
	extra     atomic.Int64 // a second event for the same change (a stop for an expiry as well as the explicit stop)
	unmatched atomic.Int64 // typing events for no recorded change
}

// typingReceiver is one receiving socket: the change it last counted for
// each key (its events arrive on its own reader goroutine).
type typingReceiver struct {
	user string
	node int
	seen map[typingKey]uint64
}

func (t *typingStats) deliver(rc *typingReceiver, raw []byte, at time.Time) {
	var ev []json.RawMessage
	var p struct {
		ConversationID string `json:"conversationId"`
		UserID         string `json:"userId"`
		Typing         bool   `json:"typing"`
	}
	if json.Unmarshal(raw, &ev) != nil || len(ev) < 2 || json.Unmarshal(ev[1], &p) != nil {
		t.unmatched.Add(1)
		return
	}
	if p.UserID == rc.user {
		return
	}
	k := typingKey{p.ConversationID, p.UserID, p.Typing}
	t.mu.Lock()
	s, ok := t.sent[k]
	t.mu.Unlock()
	if !ok {
		t.unmatched.Add(1)
		return
	}
	if rc.seen[k] == s.seq {
		t.extra.Add(1)
		return
	}
	rc.seen[k] = s.seq
	lat := at.Sub(s.at)
	t.delivered.Add(1)
	t.all.record(lat)
	if s.node == rc.node {
		t.same.record(lat)
	} else {
		t.cross.record(lat)
	}
}

// runTyping runs the typing fan-out once per -typing-nodes count.
func runTyping(ctx context.Context, o *options, r *report) error {
	for _, nodes := range o.typingNodes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := runTypingOnce(ctx, o, r, nodes); err != nil {
			return fmt.Errorf("%d node(s): %w", nodes, err)
		}
	}
	return nil
}

// runTypingOnce: -typing-rooms conversations of -typing-members sockets
// (one user each, spread over the nodes), then -typing-rate typing
// changes per second: each socket in turn alternates typing:start and
// typing:stop in its conversation, so each change is broadcast to the
// other members. Latency: the write of the change → its arrival at each
// other member.
func runTypingOnce(ctx context.Context, o *options, r *report, nodes int) error {
	o.logf("typing (%d nodes): preparing database and Redis", nodes)
	e, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer e.close()
	var ns []*node
	var pids []int
	for i := 0; i < nodes; i++ {
		n, err := e.startNode(ctx)
		if err != nil {
			return err
		}
		ns = append(ns, n)
		pids = append(pids, n.pid)
	}
	R, M := o.typingRooms, o.typingMembers
	N := R * M
	r.printf("\n== typing fan-out, %d node(s) ==\n", nodes)
	r.printf("  Redis %s at %s, key prefix %s; %d node(s)%s\n", e.redisVer, e.redisURL, e.prefix, nodes, extraFlags(o))
	r.printf("  %d conversations × %d members (one socket and user each, members of a conversation spread over the nodes); windows of %s at %v typing changes/s\n",
		R, M, o.typingDur, o.typingRates)

	ts := &typingStats{sent: map[typingKey]typingSent{}}
	nodeOf := func(i int) int { return (i / R) % nodes }
	var stats atomic.Pointer[typingStats]
	stats.Store(ts)
	spec := fleetSpec{
		count: N, rate: o.connectRate,
		addr:  func(i int) (string, int) { k := nodeOf(i); return ns[k].addr, k },
		user:  func(i int) string { return fmt.Sprintf("ty%d", i) },
		convs: func(i int) []string { return []string{fmt.Sprintf("tc%d", i%R)} },
		onEvent: func(i int) eventFunc {
			rc := &typingReceiver{user: fmt.Sprintf("ty%d", i), node: nodeOf(i), seen: map[typingKey]uint64{}}
			return func(name string, raw []byte, at time.Time) {
				if name == "typing" {
					stats.Load().deliver(rc, raw, at)
				}
			}
		},
	}
	var fs fleetStats
	o.logf("typing (%d nodes): connecting %d sockets", nodes, N)
	conns := openFleet(ctx, e, spec, &fs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, c := range conns {
		if c == nil {
			return fmt.Errorf("%d of %d sockets failed to connect:%s", fs.failed.Load()+fs.joinFail.Load(), N, fs.errorSummary())
		}
	}
	r.printf("  setup: %d sockets connected and joined in %s (join acks %s)\n", N, fs.elapsed.Round(time.Millisecond), fs.join.summary())
	sleepCtx(ctx, 3*time.Second) // let the presence:join fan-out drain

	typing := make([]bool, N)
	var seq uint64
	for wi, rate := range o.typingRates {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if wi > 0 {
			// a fresh count; the previous window's late events fall on the old one
			ts = &typingStats{sent: map[typingKey]typingSent{}}
			stats.Store(ts)
			sleepCtx(ctx, 2*time.Second)
		}
		typingWindow(ctx, o, r, e, conns, pids, ts, typing, &seq, nodes, nodeOf, rate)
	}
	if k, why := lost(conns); k > 0 {
		r.printf("  %d sockets were closed by the server: %s\n", k, why)
	}
	r.problems(e)
	return nil
}

// typingWindow sends rate typing changes per second for -typing-duration
// and measures their delivery to the other members.
func typingWindow(ctx context.Context, o *options, r *report, e *env, conns []*conn, pids []int, ts *typingStats, typing []bool, seq *uint64, nodes int, nodeOf func(int) int, rate int) {
	scen := fmt.Sprintf("typing_%dnode_%d", nodes, rate)
	R, M, N := o.typingRooms, o.typingMembers, len(conns)
	o.logf("typing (%d nodes): %d changes/s for %s", nodes, rate, o.typingDur)
	r.printf("\n  window at %d changes/s:\n", rate)
	var sent, ackErr, sendErr atomic.Int64
	var ackLat hist
	cb := func(p []byte, s, at time.Time) {
		ackLat.record(at.Sub(s))
		if !ackOK(p) {
			ackErr.Add(1)
		}
	}
	resumeGC := pauseGC() // until the deliveries have drained
	defer resumeGC()
	cs0, _ := e.commandStats(ctx)
	rd0 := e.readsProcessed(ctx)
	us0, _ := e.commandTimes(ctx)
	c0 := e.cpu(pids...)
	start := time.Now()
	end := start.Add(o.typingDur)
	interval := time.Second / time.Duration(max(1, rate))
	for j := 0; ; j++ {
		due := start.Add(time.Duration(j) * interval)
		if !due.Before(end) || ctx.Err() != nil {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		i := j % N
		c := conns[i]
		conv := fmt.Sprintf("tc%d", i%R)
		typing[i] = !typing[i]
		ev := "typing:stop"
		if typing[i] {
			ev = "typing:start"
		}
		body, _ := json.Marshal([]any{ev, map[string]string{"conversationId": conv}})
		ts.mu.Lock()
		*seq++
		ts.sent[typingKey{conv, c.user, typing[i]}] = typingSent{time.Now(), nodeOf(i), *seq}
		ts.mu.Unlock()
		sent.Add(1)
		if _, err := c.emitRaw(body, cb); err != nil {
			sendErr.Add(1)
		}
		if j%500 == 0 {
			o.progress("typing (%d nodes): %d changes sent, %d deliveries", nodes, sent.Load(), ts.delivered.Load())
		}
	}
	c1 := e.cpu(pids...)
	cs1, _ := e.commandStats(ctx) // the window's commands, without the expiries and writes of the drain
	rd1 := e.readsProcessed(ctx)
	us1, _ := e.commandTimes(ctx)
	// late deliveries: wait until they stop arriving (at most 20 s)
	drain := time.Now()
	for prev := int64(-1); time.Since(drain) < 20*time.Second && ctx.Err() == nil; {
		sleepCtx(ctx, time.Second)
		cur := ts.delivered.Load()
		if cur == prev {
			break
		}
		prev = cur
	}
	drained := time.Since(drain)
	expected := sent.Load() * int64(M-1)
	got := ts.delivered.Load()
	elapsed := c1.at.Sub(c0.at)
	r.printf("  deliveries stopped arriving %s after the window\n", drained.Round(time.Second))
	r.fig(scen, "drain_after_window", drained.Seconds(), "s", "lower")
	r.fig(scen, "deliveries_per_s", float64(got)/(elapsed+drained).Seconds(), "deliveries/s", "higher")
	r.fig(scen, "other_processes_cpu", c0.others(c1).Seconds()/elapsed.Seconds(), "cores", "none")
	r.printf("  sent %d changes in %s (%.0f/s), acks %s, %d failed acks, %d send errors\n",
		sent.Load(), elapsed.Round(time.Millisecond), float64(sent.Load())/elapsed.Seconds(), ackLat.summary(), ackErr.Load(), sendErr.Load())
	r.printf("  deliveries %d of %d expected (%.2f%% missing after the drain; %.0f/s in the window and the drain), %d typing events matching no send and %d second events for a change already delivered (a stop by expiry as well as the explicit one)\n",
		got, expected, 100*float64(expected-got)/float64(max(1, expected)), float64(got)/(elapsed+drained).Seconds(), ts.unmatched.Load(), ts.extra.Load())
	r.printf("  delivery latency: all %s\n", ts.all.summary())
	if nodes > 1 {
		r.printf("    receiver on the sender's node: %s\n    receiver on another node: %s\n", ts.same.summary(), ts.cross.summary())
	}
	r.printf("  CPU during the window: %s\n", cpuLine(c0, c1))
	if cs0 != nil && cs1 != nil && sent.Load() > 0 {
		net := cs1.sub(cs0).withoutOwn()
		r.printf("  Redis commands per change (the window, all nodes): %s\n", cmdBreakdown(net, float64(sent.Load())))
		r.fig(scen, "redis_commands_per_change", float64(net.total())/float64(sent.Load()), "commands", "lower")
	}
	if rd0 >= 0 && rd1 >= 0 && sent.Load() > 0 {
		// (the two INFO calls of the window are among them: 2 reads)
		reads := float64(rd1-rd0-2) / float64(sent.Load())
		r.printf("  Redis reads from clients per change (the window, all nodes; each a wake of Redis's event loop): %.2f\n", reads)
		r.fig(scen, "redis_reads_per_change", reads, "reads", "lower")
	}
	if us0 != nil && us1 != nil && sent.Load() > 0 {
		// Redis's CPU less this is what its connections' reads and
		// writes, Pub/Sub deliveries included, and its event loop cost
		us := us1.sub(us0).withoutOwn()
		r.printf("  Redis µs in commands per change (the window, all nodes): %s\n", cmdBreakdown(us, float64(sent.Load())))
		r.fig(scen, "redis_command_us_per_change", float64(us.total())/float64(sent.Load()), "µs", "lower")
	}
	r.figHist(scen, "delivery", &ts.all)
	if nodes > 1 {
		r.figHist(scen, "delivery_same_node", &ts.same)
		r.figHist(scen, "delivery_cross_node", &ts.cross)
	}
	r.figHist(scen, "ack", &ackLat)
	r.fig(scen, "missing", 100*float64(expected-got)/float64(max(1, expected)), "%", "lower")
	r.fig(scen, "server_cpu", (c1.server-c0.server).Seconds()/elapsed.Seconds(), "cores", "lower")
	r.fig(scen, "redis_cpu", (c1.redis-c0.redis).Seconds()/elapsed.Seconds(), "cores", "lower")
	// end the typing sessions still open, unmeasured, so that the next
	// window starts from nobody typing (not from their expiries)
	for i, c := range conns {
		if typing[i] {
			typing[i] = false
			body, _ := json.Marshal([]any{"typing:stop", map[string]string{"conversationId": fmt.Sprintf("tc%d", i%R)}})
			_, _ = c.emitRaw(body, nil)
		}
	}
}
