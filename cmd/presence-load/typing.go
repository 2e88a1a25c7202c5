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
	unmatched atomic.Int64 // typing events for no recorded send (e.g. the TTL expired)
}

func (t *typingStats) deliver(raw []byte, recvUser string, recvNode int, at time.Time) {
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
	if p.UserID == recvUser {
		return
	}
	t.mu.Lock()
	s, ok := t.sent[typingKey{p.ConversationID, p.UserID, p.Typing}]
	t.mu.Unlock()
	if !ok {
		t.unmatched.Add(1)
		return
	}
	lat := at.Sub(s.at)
	t.delivered.Add(1)
	t.all.record(lat)
	if s.node == recvNode {
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
	scen := fmt.Sprintf("typing_%dnode", nodes)
	r.printf("\n== typing fan-out, %d node(s) ==\n", nodes)
	r.printf("  Redis %s at %s, key prefix %s; %d node(s)%s\n", e.redisVer, e.redisURL, e.prefix, nodes, extraFlags(o))
	r.printf("  %d conversations × %d members (one socket and user each, members of a conversation spread over the nodes); %d typing changes/s for %s\n",
		R, M, o.typingRate, o.typingDur)

	ts := &typingStats{sent: map[typingKey]typingSent{}}
	nodeOf := func(i int) int { return (i / R) % nodes }
	spec := fleetSpec{
		count: N, rate: o.connectRate,
		addr:  func(i int) (string, int) { k := nodeOf(i); return ns[k].addr, k },
		user:  func(i int) string { return fmt.Sprintf("ty%d", i) },
		convs: func(i int) []string { return []string{fmt.Sprintf("tc%d", i%R)} },
		onEvent: func(i int) eventFunc {
			user, node := fmt.Sprintf("ty%d", i), nodeOf(i)
			return func(name string, raw []byte, at time.Time) {
				if name == "typing" {
					ts.deliver(raw, user, node, at)
				}
			}
		},
	}
	var fs fleetStats
	o.logf("typing (%d nodes): connecting %d sockets", nodes, N)
	conns := openFleet(ctx, e, spec, &fs)
	e.afterStop = append(e.afterStop, func() { dropFleet(conns) })
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

	o.logf("typing (%d nodes): %d changes/s for %s", nodes, o.typingRate, o.typingDur)
	typing := make([]bool, N)
	var sent, ackErr, sendErr atomic.Int64
	var ackLat hist
	cb := func(p []byte, s, at time.Time) {
		ackLat.record(at.Sub(s))
		if !ackOK(p) {
			ackErr.Add(1)
		}
	}
	c0 := e.cpu(pids...)
	start := time.Now()
	end := start.Add(o.typingDur)
	interval := time.Second / time.Duration(max(1, o.typingRate))
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
		ts.sent[typingKey{conv, c.user, typing[i]}] = typingSent{time.Now(), nodeOf(i)}
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
	expected := sent.Load() * int64(M-1)
	got := ts.delivered.Load()
	elapsed := c1.at.Sub(c0.at)
	r.printf("  deliveries stopped arriving %s after the window\n", time.Since(drain).Round(time.Second))
	r.fig(scen, "drain_after_window", time.Since(drain).Seconds(), "s", "lower")
	r.fig(scen, "other_processes_cpu", c0.others(c1).Seconds()/elapsed.Seconds(), "cores", "none")
	r.printf("  sent %d changes in %s (%.0f/s), acks %s, %d failed acks, %d send errors\n",
		sent.Load(), elapsed.Round(time.Millisecond), float64(sent.Load())/elapsed.Seconds(), ackLat.summary(), ackErr.Load(), sendErr.Load())
	r.printf("  deliveries %d of %d expected (%.2f%% missing after the drain; %.0f/s in the window and the drain), %d typing events matching no send (expiries)\n",
		got, expected, 100*float64(expected-got)/float64(max(1, expected)), float64(got)/elapsed.Seconds(), ts.unmatched.Load())
	r.printf("  delivery latency: all %s\n", ts.all.summary())
	if nodes > 1 {
		r.printf("    receiver on the sender's node: %s\n    receiver on another node: %s\n", ts.same.summary(), ts.cross.summary())
	}
	r.printf("  CPU during the window: %s\n", cpuLine(c0, c1))
	r.figHist(scen, "delivery", &ts.all)
	if nodes > 1 {
		r.figHist(scen, "delivery_same_node", &ts.same)
		r.figHist(scen, "delivery_cross_node", &ts.cross)
	}
	r.figHist(scen, "ack", &ackLat)
	r.fig(scen, "missing", 100*float64(expected-got)/float64(max(1, expected)), "%", "lower")
	r.fig(scen, "server_cpu", (c1.server-c0.server).Seconds()/elapsed.Seconds(), "cores", "lower")
	r.fig(scen, "redis_cpu", (c1.redis-c0.redis).Seconds()/elapsed.Seconds(), "cores", "lower")
	if k, why := lost(conns); k > 0 {
		r.printf("  %d sockets were closed by the server: %s\n", k, why)
	}
	r.problems(e)
	return nil
}
