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

// flapPhase is the status change the subscribers are waiting for.
type flapPhase struct {
	mu     sync.Mutex
	status string // "online" or "offline"; "" between phases
	t0     time.Time
	node   int // node the target is (was) connected to
	got    []bool
	n      int
	done   chan struct{}

	lat       map[string]*hist  // status → all deliveries
	latSame   map[string]*hist  // subscriber on the target's node
	latOther  map[string]*hist  // subscriber on the other node
	first     map[string]string // status → the first update's payload
	dups      atomic.Int64
	stray     atomic.Int64 // outside a phase, of another status or user
	straySmpl []string
}

func (f *flapPhase) begin(status string, node, subs int) {
	f.mu.Lock()
	f.status, f.node, f.t0, f.n = status, node, time.Now(), 0
	f.got = make([]bool, subs)
	f.done = make(chan struct{})
	f.mu.Unlock()
}

func (f *flapPhase) end() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	missing := len(f.got) - f.n
	f.status = ""
	return missing
}

// wait waits until every subscriber has had the phase's update, at most
// timeout or until ctx ends, then ends the phase; it returns end's count of
// missing updates.
func (f *flapPhase) wait(ctx context.Context, timeout time.Duration) int {
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	select {
	case <-done:
	case <-time.After(timeout):
	case <-ctx.Done():
	}
	return f.end()
}

func (f *flapPhase) deliver(target string, idx, node int, raw []byte, at time.Time) {
	var ev []json.RawMessage
	var p struct {
		UserID string `json:"userId"`
		Status string `json:"status"`
	}
	if json.Unmarshal(raw, &ev) != nil || len(ev) < 2 || json.Unmarshal(ev[1], &p) != nil {
		f.strayf("undecodable %s", clip(raw))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.UserID != target || f.status == "" || p.Status != f.status {
		f.stray.Add(1)
		if len(f.straySmpl) < 5 {
			f.straySmpl = append(f.straySmpl, fmt.Sprintf("while waiting for %q: %s", f.status, clip(ev[1])))
		}
		return
	}
	if f.got[idx] {
		f.dups.Add(1)
		return
	}
	f.got[idx] = true
	f.n++
	if _, ok := f.first[p.Status]; !ok {
		f.first[p.Status] = string(ev[1])
	}
	lat := at.Sub(f.t0)
	f.lat[p.Status].record(lat)
	if node == f.node {
		f.latSame[p.Status].record(lat)
	} else {
		f.latOther[p.Status].record(lat)
	}
	if f.n == len(f.got) {
		close(f.done)
	}
}

func (f *flapPhase) strayf(format string, a ...any) {
	f.stray.Add(1)
	f.mu.Lock()
	if len(f.straySmpl) < 5 {
		f.straySmpl = append(f.straySmpl, fmt.Sprintf(format, a...))
	}
	f.mu.Unlock()
}

func runSubscribe(ctx context.Context, o *options, r *report) error {
	o.logf("subscribe: preparing database and Redis")
	e, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer e.close()
	grace := o.flapGrace.String()
	var nodes []*node
	for i := 0; i < 2; i++ {
		n, err := e.startNode(ctx, "--flap-grace", grace)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	S := o.subscribers
	const target = "target-T"
	r.printf("\n== subscribe scenario (issue #5) ==\n")
	r.printf("  Redis %s at %s (%s), key prefix %s; PostgreSQL %s, database %s\n",
		e.redisVer, e.redisURL, map[bool]string{true: "private redis-server started by this tool", false: "shared"}[e.ownRedis != nil], e.prefix, e.pgVersion, e.dbName)
	r.printf("  two nodes (pids %d, %d) at %s and %s, same Redis prefix and database, --flap-grace %s, other settings default%s\n",
		nodes[0].pid, nodes[1].pid, nodes[0].addr, nodes[1].addr, grace, extraFlags(o))

	fp := &flapPhase{
		lat:      map[string]*hist{"online": {}, "offline": {}},
		latSame:  map[string]*hist{"online": {}, "offline": {}},
		latOther: map[string]*hist{"online": {}, "offline": {}},
		first:    map[string]string{},
	}
	var pushes pushCounters
	spec := fleetSpec{
		count: S, rate: o.connectRate,
		addr: func(i int) (string, int) { return nodes[i%2].addr, i % 2 },
		user: func(i int) string { return fmt.Sprintf("sub%d", i) },
		onEvent: func(i int) eventFunc {
			node := i % 2
			return func(name string, raw []byte, at time.Time) {
				pushes.count(name, raw)
				if name == "presence:update" {
					fp.deliver(target, i, node, raw, at)
				}
			}
		},
	}
	var fs fleetStats
	o.logf("subscribe: connecting %d subscribers", S)
	conns := openFleet(ctx, e, spec, &fs)
	for _, c := range conns {
		if c == nil {
			return fmt.Errorf("%d of %d subscribers failed to connect:%s", fs.failed.Load(), S, fs.errorSummary())
		}
	}
	r.printf("  %d subscribers connected (%d per node) in %s (connect %s)\n", S, S/2, fs.elapsed.Round(time.Millisecond), fs.connect.summary())

	// every subscriber subscribes to T
	var subLat hist
	var subFail atomic.Int64
	var subWrong atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 100)
	for _, c := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func(c *conn) {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ack, rtt, err := c.call(cctx, "presence:subscribe", map[string]any{"userIds": []string{target}})
			if err != nil || !ackOK(ack) {
				subFail.Add(1)
				return
			}
			subLat.record(rtt)
			var a struct {
				Presences []struct {
					UserID string `json:"userId"`
					Status string `json:"status"`
				} `json:"presences"`
			}
			if json.Unmarshal(ack, &a) != nil || len(a.Presences) != 1 || a.Presences[0].UserID != target || a.Presences[0].Status != "offline" {
				subWrong.Add(1)
			}
		}(c)
	}
	wg.Wait()
	r.printf("  presence:subscribe [T] acks (100 in flight): %s, %d failed, %d not {T offline}\n", subLat.summary(), subFail.Load(), subWrong.Load())
	r.figHist("subscribe", "subscribe_ack", &subLat)

	// T flaps
	o.logf("subscribe: %d flaps", o.flaps)
	var connAck hist
	missing := map[string]int{}
	pids := []int{nodes[0].pid, nodes[1].pid}
	fc0 := e.cpu(pids...)
	timeoutOnline := 5 * time.Second
	timeoutOffline := o.flapGrace + 5*time.Second
	for k := 0; k < o.flaps && ctx.Err() == nil; k++ {
		node := nodes[k%2]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t, err := openSocket(cctx, node.addr, target, node.idx, func(name string, _ []byte, _ time.Time) {})
		if err != nil {
			cancel()
			return fmt.Errorf("target connect %d: %w", k, err)
		}
		fp.begin("online", node.idx, S)
		err = t.connect(cctx, e.token(target))
		cancel()
		if err != nil {
			t.Close()
			return fmt.Errorf("target connect %d: %w", k, err)
		}
		fp.mu.Lock()
		connAck.record(t.connectedAt.Sub(fp.t0))
		fp.mu.Unlock()
		missing["online"] += fp.wait(ctx, timeoutOnline)
		time.Sleep(50 * time.Millisecond)

		fp.begin("offline", node.idx, S)
		t.Close()
		missing["offline"] += fp.wait(ctx, timeoutOffline)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // late strays
	fc1 := e.cpu(pids...)
	r.printf("\n  target T connected/disconnected %d times, alternating between the nodes; t0 = the tool writes T's Socket.IO CONNECT (online) or closes T's socket (offline):\n", o.flaps)
	r.printf("  T's own CONNECT answer after t0: %s\n", connAck.summary())
	rows := [][]string{{"update", "deliveries", "missing", "p50", "p90", "p99", "max", "same node p50/p99", "other node p50/p99"}}
	for _, st := range []string{"online", "offline"} {
		h := fp.lat[st]
		rows = append(rows, []string{st, fmt.Sprint(h.count.Load()), fmt.Sprint(missing[st]),
			ms(h.quantile(0.5)), ms(h.quantile(0.9)), ms(h.quantile(0.99)), ms(h.maxDur()),
			ms(fp.latSame[st].quantile(0.5)) + " / " + ms(fp.latSame[st].quantile(0.99)),
			ms(fp.latOther[st].quantile(0.5)) + " / " + ms(fp.latOther[st].quantile(0.99))})
	}
	r.table(rows)
	for _, st := range []string{"online", "offline"} {
		r.figHist("subscribe", "update_"+st, fp.lat[st])
		r.fig("subscribe", "update_"+st+"_missing", float64(missing[st]), "deliveries", "lower")
	}
	off := fp.lat["offline"]
	g := o.flapGrace
	if off.count.Load() > 0 {
		// the Node peer has no flap grace: its offline update is not delayed
		wait := g
		if o.server == "node" {
			wait = 0
		}
		r.figMs("subscribe", "update_offline_minus_grace_p50", off.quantile(0.5)-wait)
		r.figMs("subscribe", "update_offline_minus_grace_p99", off.quantile(0.99)-wait)
	}
	r.printf("  offline minus the %s flap grace: p50 %s, p90 %s, p99 %s, max %s (the node the socket left wakes at the grace's end, within 5ms; a grace another node must end waits for its tick, up to 50ms)\n",
		g, ms(off.quantile(0.5)-g), ms(off.quantile(0.9)-g), ms(off.quantile(0.99)-g), ms(off.maxDur()-g))
	r.printf("  CPU during the flaps: %s\n", cpuLine(fc0, fc1))
	r.fig("subscribe", "flaps_other_processes_cpu", fc0.others(fc1).Seconds()/fc1.at.Sub(fc0.at).Seconds(), "cores", "none")
	r.printf("  first updates: online %s; offline %s\n", fp.first["online"], fp.first["offline"])
	r.printf("  duplicate updates %d, unexpected updates %d", fp.dups.Load(), fp.stray.Load())
	for _, s := range fp.straySmpl {
		r.printf("\n    %s", s)
	}
	r.printf("\n")

	// presence:query
	querier := conns[0]
	r.printf("\n  presence:query from one socket on node 0, one query at a time; half the ids are online subscribers, half never-seen users:\n")
	mon, monErr := startMonitor(e.redisURL, e.prefix)
	bs0, _ := e.commandStats(ctx)
	b0 := time.Now()
	sleepCtx(ctx, 5*time.Second)
	bs1, _ := e.commandStats(ctx)
	b1 := time.Now()
	bg := bs1.sub(bs0).withoutOwn()
	bgRate := float64(bg.total()) / b1.Sub(b0).Seconds()
	r.printf("  idle baseline (5s): %.1f Redis commands/s (%s)\n", bgRate, cmdBreakdown(bg, b1.Sub(b0).Seconds()))
	if monErr == nil {
		r.printf("  %s\n", foreignTraffic(mon.stop(b0, b1), bg, b1.Sub(b0)))
	}
	qrows := [][]string{{"ids", "queries", "p50", "p90", "p99", "max", "errors", "Redis cmds/query (INFO, net)", "MONITOR: sent by server", "inside Lua"}}
	var details []string
	for _, size := range o.querySizes {
		ids := make([]string, size)
		for i := range ids {
			if i%2 == 0 {
				ids[i] = fmt.Sprintf("sub%d", (i/2)%S)
			} else {
				ids[i] = fmt.Sprintf("ghost%d", i/2)
			}
		}
		payload := map[string]any{"userIds": ids}
		var h, warm hist
		var qerr int
		var errSample string
		one := func(h *hist) {
			cctx, cancel := context.WithTimeout(ctx, o.ackTimeout)
			defer cancel()
			ack, rtt, err := querier.call(cctx, "presence:query", payload)
			if err != nil || !ackOK(ack) {
				qerr++
				if errSample == "" {
					errSample = fmt.Sprint(err, " ", clip(ack))
				}
				return
			}
			var a struct {
				Presences []json.RawMessage `json:"presences"`
			}
			if json.Unmarshal(ack, &a) != nil || len(a.Presences) != size {
				qerr++
				if errSample == "" {
					errSample = "wrong number of presences: " + clip(ack)
				}
				return
			}
			h.record(rtt)
		}
		// warm-up, then the anatomy sample under MONITOR
		for i := 0; i < 5; i++ {
			one(&warm)
		}
		const sample = 20
		topS, luaS := "-", "-"
		if mon, err := startMonitor(e.redisURL, e.prefix); err == nil {
			time.Sleep(200 * time.Millisecond)
			var tmp hist
			from := time.Now()
			for i := 0; i < sample; i++ {
				cctx, cancel := context.WithTimeout(ctx, o.ackTimeout)
				_, rtt, err := querier.call(cctx, "presence:query", payload)
				cancel()
				if err == nil {
					tmp.record(rtt)
				}
			}
			a := mon.stop(from, time.Now())
			top, lua := a.totals()
			topS = fmt.Sprintf("%.2f [%s]", float64(top)/sample, perOp(a.top, sample))
			luaS = fmt.Sprintf("%.2f [%s]", float64(lua)/sample, perOp(a.lua, sample))
		}
		cs0, _ := e.commandStats(ctx)
		qc0 := e.cpu(pids...)
		q0 := time.Now()
		for i := 0; i < o.queries && ctx.Err() == nil; i++ {
			one(&h)
		}
		qd := time.Since(q0)
		r.figHist("subscribe", fmt.Sprintf("query_%d", size), &h)
		r.fig("subscribe", fmt.Sprintf("query_%d_errors", size), float64(qerr), "queries", "lower")
		cs1, _ := e.commandStats(ctx)
		details = append(details, fmt.Sprintf("%d ids: CPU %s", size, cpuLine(qc0, e.cpu(pids...))))
		d := cs1.sub(cs0).withoutOwn()
		net := (float64(d.total()) - bgRate*qd.Seconds()) / float64(o.queries)
		qrows = append(qrows, []string{fmt.Sprint(size), fmt.Sprint(h.count.Load()), ms(h.quantile(0.5)), ms(h.quantile(0.9)),
			ms(h.quantile(0.99)), ms(h.maxDur()), fmt.Sprint(qerr), fmt.Sprintf("%.2f", net), topS, luaS})
		if errSample != "" {
			details = append(details, fmt.Sprintf("%d ids: first error: %s", size, errSample))
		}
	}
	r.table(qrows)
	for _, d := range details {
		r.printf("  %s\n", d)
	}
	r.printf("  pushes received by the subscribers: %s\n", pushes.String())
	if n, why := lost(conns); n > 0 {
		r.printf("  %d subscriber sockets were closed by the server during the run: %s\n", n, why)
	}
	r.problems(e)
	return nil
}
