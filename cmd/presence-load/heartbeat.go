//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pushCounters counts the server events the sockets receive.
type pushCounters struct {
	join, leave, update, typing, other         atomic.Int64
	leaveLeft, leaveDisconnected, leaveTimeout atomic.Int64
}

func (p *pushCounters) count(name string, raw []byte) {
	switch name {
	case "presence:join":
		p.join.Add(1)
	case "presence:leave":
		p.leave.Add(1)
		switch {
		case bytes.Contains(raw, []byte(`"reason":"timeout"`)):
			p.leaveTimeout.Add(1)
		case bytes.Contains(raw, []byte(`"reason":"disconnected"`)):
			p.leaveDisconnected.Add(1)
		case bytes.Contains(raw, []byte(`"reason":"left"`)):
			p.leaveLeft.Add(1)
		}
	case "presence:update":
		p.update.Add(1)
	case "typing":
		p.typing.Add(1)
	case "session":
	default:
		p.other.Add(1)
	}
}

func (p *pushCounters) String() string {
	return fmt.Sprintf("presence:join %d, presence:leave %d (reason timeout %d, disconnected %d, left %d), presence:update %d, typing %d, other %d",
		p.join.Load(), p.leave.Load(), p.leaveTimeout.Load(), p.leaveDisconnected.Load(), p.leaveLeft.Load(), p.update.Load(), p.typing.Load(), p.other.Load())
}

// cpuSnap is a CPU reading of the server, Redis, this process and the
// machine.
type cpuSnap struct {
	at                  time.Time
	server, redis, self time.Duration
	machBusy, machTotal time.Duration
}

// others is the machine's busy time not used by the server, Redis or this
// process between a and b (PostgreSQL, other programs on the machine).
func (a cpuSnap) others(b cpuSnap) time.Duration {
	d := (b.machBusy - a.machBusy) - (b.server - a.server) - (b.redis - a.redis) - (b.self - a.self)
	return max(d, 0)
}

func (e *env) cpu(pids ...int) cpuSnap {
	s := cpuSnap{at: time.Now(), redis: cpuTime(e.redisPID), self: cpuTime(os.Getpid())}
	for _, p := range pids {
		s.server += cpuTime(p)
	}
	s.machBusy, s.machTotal = machineCPU()
	return s
}

// cpuLine is "server 1.23 cores, redis 0.40, generator 0.30; machine 95% busy".
func cpuLine(a, b cpuSnap) string {
	over := b.at.Sub(a.at)
	busy := "-"
	if t := b.machTotal - a.machTotal; t > 0 {
		busy = pct(float64(b.machBusy-a.machBusy), float64(t))
	}
	return fmt.Sprintf("server %s cores, redis %s, generator %s, other processes %s; machine %s busy",
		cores(b.server-a.server, over), cores(b.redis-a.redis, over), cores(b.self-a.self, over), cores(a.others(b), over), busy)
}

type window struct {
	target   int
	dur      time.Duration
	elapsed  time.Duration // between the command/CPU snapshots
	lat      hist
	sent     atomic.Int64
	ok       atomic.Int64
	failed   atomic.Int64 // ok:false acks
	late     atomic.Int64 // acks later than the timeout
	inWindow atomic.Int64 // acks received before the window ended
	sendErr  atomic.Int64
	timeouts int64
	cmds     cmdStats
	cpu0     cpuSnap
	cpu1     cpuSnap
	srvMean  time.Duration // server-side handling time (its own histogram)
	errMu    sync.Mutex
	errs     []string
	perf     string
	lostSock int
	lostWhy  string
	skipped  atomic.Int64 // sends skipped: the socket was closed by the server
	perSec   []*hist      // latency by the second of the window the heartbeat was sent in
	gcs      float64      // the server's GC cycles during the window
	marks    []string     // per second: "gc" when a server GC cycle ended, "gen-gc" when one of this generator's did, "refresh" when a third or more of a refresh pass ran
}

func (w *window) achieved() float64 {
	return float64(w.sent.Load()+w.skipped.Load()) / w.dur.Seconds()
}

func (w *window) failRate() float64 {
	if w.sent.Load() == 0 {
		return 1
	}
	return float64(w.failed.Load()+w.timeouts+w.sendErr.Load()) / float64(w.sent.Load())
}

// overloaded: far beyond the latency target, or failing.
func (w *window) overloaded(o *options) bool {
	return w.lat.quantile(0.99) > 20*o.p99Target || w.failRate() > 0.01
}

func (w *window) pass(o *options) bool {
	return w.lat.count.Load() > 0 && w.lat.quantile(0.99) < o.p99Target &&
		w.achieved() >= 0.95*float64(w.target) && w.failRate() < 0.001
}

func runHeartbeat(ctx context.Context, o *options, r *report) error {
	e, n, err := oneNode(ctx, o, "heartbeat")
	if err != nil {
		return err
	}
	defer e.close()
	N := o.sockets
	K := max(o.convsPer, N*o.convsPer/o.members)
	r.printf("\n== heartbeat scenario (issue #4) ==\n")
	r.printf("  Redis %s at %s (%s), key prefix %s; PostgreSQL %s, database %s\n",
		e.redisVer, e.redisURL, map[bool]string{true: "private redis-server started by this tool", false: "shared"}[e.ownRedis != nil], e.prefix, e.pgVersion, e.dbName)
	r.printf("  one node (pid %d) at %s, membership open, handshake limit off, other settings default (TTL 45s: each node reconciles its entries in Redis every TTL/2)%s\n", n.pid, n.addr, extraFlags(o))
	r.printf("  %d sockets, one user each, each joining %d of %d conversations (~%d members each); connect rate %d/s\n",
		N, o.convsPer, K, N*o.convsPer/K, o.connectRate)

	time.Sleep(time.Second)
	rss0 := rssKB(n.pid)
	redis0, redisMemErr := e.usedMemory(ctx)
	m0 := scrape(n.addr, "go_memstats_heap_inuse_bytes", "go_goroutines")

	var pushes pushCounters
	onEvent := func(name string, raw []byte, _ time.Time) { pushes.count(name, raw) }
	spec := fleetSpec{
		count: N, rate: o.connectRate,
		addr: func(int) (string, int) { return n.addr, 0 },
		user: func(i int) string { return fmt.Sprintf("u%d", i) },
		convs: func(i int) []string {
			out := make([]string, o.convsPer)
			for j := range out {
				out[j] = fmt.Sprintf("c%d", (i*o.convsPer+j)%K)
			}
			return out
		},
		onEvent: func(int) eventFunc { return onEvent },
	}
	var fs fleetStats
	o.logf("heartbeat: connecting %d sockets", N)
	conns, c0, c1 := openFleetOn(ctx, e, n, spec, &fs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	live := connected(conns)
	r.printf("\n  setup: %d/%d sockets connected in %s (connect %s), %d joins failed%s\n",
		len(live), N, fs.elapsed.Round(time.Millisecond), fs.connect.summary(), fs.joinFail.Load(), fs.errorSummary())
	r.printf("  join acks: %s\n", fs.join.summary())
	r.printf("  CPU during setup: %s\n", cpuLine(c0, c1))
	if len(live) == 0 {
		return fmt.Errorf("no socket connected")
	}
	r.fig("heartbeat", "setup_sockets_per_s", float64(len(live))/fs.elapsed.Seconds(), "sockets/s", "higher")
	r.figHist("heartbeat", "setup_connect", &fs.connect)
	r.figHist("heartbeat", "join_ack", &fs.join)
	r.fig("heartbeat", "join_failed", float64(fs.joinFail.Load()+fs.failed.Load()), "joins", "lower")
	r.fig("heartbeat", "setup_other_processes_cpu", c0.others(c1).Seconds()/c1.at.Sub(c0.at).Seconds(), "cores", "none")
	r.fig("heartbeat", "setup_server_cpu_per_socket", float64((c1.server-c0.server).Microseconds())/float64(len(live)), "µs", "lower")
	r.fig("heartbeat", "setup_redis_cpu_per_socket", float64((c1.redis-c0.redis).Microseconds())/float64(len(live)), "µs", "lower")

	o.logf("heartbeat: settling")
	time.Sleep(3 * time.Second)
	// the room fan-out of the joins (presence:join to every member) may
	// still be under way: wait until the pushes stop (at most -settle), so
	// that the heartbeat windows do not measure its tail
	settled := time.Now()
	for prev := pushes.join.Load(); time.Since(settled) < o.settle && ctx.Err() == nil; {
		time.Sleep(2 * time.Second)
		cur := pushes.join.Load()
		if cur == prev {
			break
		}
		o.progress("heartbeat: presence:join fan-out still arriving (%d pushes)", cur)
		prev = cur
	}
	r.printf("  the join fan-out had arrived %s after the setup (presence:join pushes: %d)\n", (3*time.Second + time.Since(settled)).Round(time.Second), pushes.join.Load())
	r.fig("heartbeat", "join_fanout_drain", (3*time.Second + time.Since(settled)).Seconds(), "s", "lower")
	rss1 := rssKB(n.pid)
	m1 := scrape(n.addr, "go_memstats_heap_inuse_bytes", "go_goroutines")
	L := float64(len(live))
	r.printf("  pushes received during setup: %s\n", pushes.String())
	if n, why := lost(live); n > 0 {
		r.printf("  %d sockets were closed by the server during setup: %s\n", n, why)
	}
	r.printf("\n  server memory: VmRSS %.1f MiB before connecting → %.1f MiB with %d sockets joined: %.1f KiB per socket (Go heap in use %.1f KiB per socket; goroutines %.1f per socket)\n",
		float64(rss0)/1024, float64(rss1)/1024, len(live), float64(rss1-rss0)/L,
		(m1["go_memstats_heap_inuse_bytes"]-m0["go_memstats_heap_inuse_bytes"])/1024/L,
		(m1["go_goroutines"]-m0["go_goroutines"])/L)
	r.fig("heartbeat", "rss_joined_per_socket", float64(rss1-rss0)/L, "KiB", "lower")
	if redis1, err := e.usedMemory(ctx); err == nil && redisMemErr == nil {
		data := float64(redis1.data() - redis0.data())
		r.fig("heartbeat", "redis_bytes_per_user", data/L, "bytes", "lower")
		shared := ""
		if e.ownRedis == nil {
			shared = " (a shared Redis: other programs' keys may be counted, and so may Redis 7's latency histograms of commands first called during the setup, ~24 KB each; -redis own is exact)"
		}
		r.printf("  Redis memory less its connections' buffers: %.2f MiB → %.2f MiB: %.0f bytes per online user (one socket each, in %d conversations), or %.0f bytes per conversation of ~%d members%s\n",
			float64(redis0.data())/(1<<20), float64(redis1.data())/(1<<20), data/L, o.convsPer,
			data/float64(K), N*o.convsPer/K, shared)
		r.printf("  (used_memory %.2f MiB → %.2f MiB: %.0f bytes per online user; the connections' buffers %.0f KiB → %.0f KiB; %d connections to Redis, this tool's among them)\n",
			float64(redis0.used)/(1<<20), float64(redis1.used)/(1<<20), float64(redis1.used-redis0.used)/L,
			float64(redis0.clients)/1024, float64(redis1.clients)/1024, e.redisClients(ctx))
	}

	// idle baseline: the server's own Redis traffic (leases, refresh, timers)
	o.logf("heartbeat: baseline window %s", o.baseline)
	mon, monErr := startMonitor(e.redisURL, e.prefix)
	bs0, err := e.commandStats(ctx)
	if err != nil {
		return err
	}
	bc0 := e.cpu(n.pid)
	sleepCtx(ctx, o.baseline)
	bs1, err := e.commandStats(ctx)
	if err != nil {
		return err
	}
	bc1 := e.cpu(n.pid)
	bg := bs1.sub(bs0).withoutOwn()
	bgDur := bc1.at.Sub(bc0.at)
	bgRate := float64(bg.total()) / bgDur.Seconds()
	r.printf("\n  idle baseline (%s, sockets connected, no heartbeats): %.0f Redis commands/s (%s); CPU %s\n",
		bgDur.Round(time.Millisecond), bgRate, cmdBreakdown(bg, bgDur.Seconds()), cpuLine(bc0, bc1))
	if monErr == nil {
		r.printf("  %s\n", foreignTraffic(mon.stop(bc0.at, bc1.at), bg, bgDur))
	}
	rss2 := rssKB(n.pid)
	m2 := scrape(n.addr, "go_memstats_heap_inuse_bytes")
	r.printf("  server memory after the idle window: VmRSS %.1f MiB, %.1f KiB per socket (Go heap in use %.1f KiB per socket)\n",
		float64(rss2)/1024, float64(rss2-rss0)/L, (m2["go_memstats_heap_inuse_bytes"]-m0["go_memstats_heap_inuse_bytes"])/1024/L)

	// anatomy of single heartbeats (MONITOR sample)
	body := []byte(`["heartbeat",{"active":true}]`)
	if !o.active {
		body = []byte(`["heartbeat",{"active":false}]`)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// the shapes of a heartbeat ack and a conversation:join ack (CONTRACT §1)
	{
		cctx, cancel := context.WithTimeout(ctx, o.ackTimeout)
		hb, _, err1 := live[0].call(cctx, "heartbeat", map[string]any{"active": o.active})
		jn, _, err2 := live[0].call(cctx, "conversation:join", map[string]string{"conversationId": spec.convs(0)[0]})
		cancel()
		r.printf("  ack shapes: heartbeat %s; conversation:join (again) %s\n", checkHeartbeatAck(hb, err1), checkJoinAck(jn, err2, spec.convs(0)[0]))
	}
	sample := min(200, len(live))
	if mon, err := startMonitor(e.redisURL, e.prefix); err != nil {
		r.printf("  MONITOR sample: unavailable: %v\n", err)
	} else {
		time.Sleep(200 * time.Millisecond)
		var sh hist
		from := time.Now()
		for i := 0; i < sample; i++ {
			ch := make(chan struct{})
			sent, err := live[i].emitRaw(body, func(_ []byte, sent, at time.Time) { sh.record(at.Sub(sent)); close(ch) })
			_ = sent
			if err == nil {
				select {
				case <-ch:
				case <-time.After(o.ackTimeout):
				}
			}
		}
		to := time.Now()
		a := mon.stop(from, to)
		top, lua := a.totals()
		r.printf("  anatomy (MONITOR, %d single heartbeats one after another, ack %s): per heartbeat %.2f commands sent by the server [%s] + %.2f run inside Lua [%s]\n",
			sample, sh.summary(), float64(top)/float64(sample), perOp(a.top, sample), float64(lua)/float64(sample), perOp(a.lua, sample))
		r.printf("    (commands naming the key prefix during the %s the sample took, background included; a heartbeat's commands go in one pipeline: 1 round trip)\n", to.Sub(from).Round(time.Millisecond))
	}

	rates := o.rates
	durs := o.stepDuration
	if len(rates) == 0 {
		rates, durs = []int{o.rate}, o.duration
	}
	var wins []*window
	for i, rate := range rates {
		if ctx.Err() != nil {
			break
		}
		if i > 0 {
			sleepCtx(ctx, 2*time.Second)
		}
		o.logf("heartbeat: %d/s for %s", rate, durs)
		resumeGC := pauseGC() // the generator's collections would time acks late (see pauseGC)
		w := heartbeatWindow(ctx, o, e, n, live, body, rate, durs)
		resumeGC()
		w.lostSock, w.lostWhy = lost(live)
		wins = append(wins, w)
		if len(rates) > 1 && i < len(rates)-1 && o.stepStop && w.overloaded(o) {
			r.printf("\n  %d/s overloaded the server (p99 %s, %.1f%% failed or timed out): the higher rates (%v) are skipped\n",
				rate, ms(w.lat.quantile(0.99)), 100*w.failRate(), rates[i+1:])
			break
		}
	}

	r.printf("\n  heartbeat windows of %s (latency: from the write of each heartbeat to its ack, open loop, %d pacing goroutines; acked/s: acks received within the window; srv mean: the server's own handling time; timeouts: no ack within %s; Redis cmds and CPU µs per acked heartbeat, net = less the idle baseline):\n", durs, o.workers, o.ackTimeout)
	rows := [][]string{{"target/s", "sent/s", "acked/s", "acked", "p50", "p90", "p99", "max", "mean", "srv mean", "errors", "timeouts", "Redis cmds/hb raw", "net", "CPU µs/hb srv/redis", "CPU (cores)"}}
	for _, w := range wins {
		okN := float64(w.ok.Load())
		raw, net := "-", "-"
		if okN > 0 {
			raw = fmt.Sprintf("%.2f", float64(w.cmds.total())/okN)
			net = fmt.Sprintf("%.2f", (float64(w.cmds.total())-bgRate*w.elapsed.Seconds())/okN)
		}
		perHB := "-"
		if okN > 0 {
			srv := (w.cpu1.server - w.cpu0.server) - time.Duration(float64(bc1.server-bc0.server)/bgDur.Seconds()*w.elapsed.Seconds())
			red := (w.cpu1.redis - w.cpu0.redis) - time.Duration(float64(bc1.redis-bc0.redis)/bgDur.Seconds()*w.elapsed.Seconds())
			perHB = fmt.Sprintf("%.0f / %.0f", float64(srv.Microseconds())/okN, float64(red.Microseconds())/okN)
		}
		rows = append(rows, []string{
			fmt.Sprint(w.target), fmt.Sprintf("%.0f", w.achieved()), fmt.Sprintf("%.0f", float64(w.inWindow.Load())/w.dur.Seconds()), fmt.Sprint(w.ok.Load()),
			ms(w.lat.quantile(0.5)), ms(w.lat.quantile(0.9)), ms(w.lat.quantile(0.99)), ms(w.lat.maxDur()), ms(w.lat.mean()), ms(w.srvMean),
			fmt.Sprint(w.failed.Load() + w.sendErr.Load()), fmt.Sprint(w.timeouts), raw, net, perHB,
			fmt.Sprintf("srv %s redis %s gen %s other %s (%s busy)", cores(w.cpu1.server-w.cpu0.server, w.elapsed), cores(w.cpu1.redis-w.cpu0.redis, w.elapsed),
				cores(w.cpu1.self-w.cpu0.self, w.elapsed), cores(w.cpu0.others(w.cpu1), w.elapsed), pct(float64(w.cpu1.machBusy-w.cpu0.machBusy), float64(w.cpu1.machTotal-w.cpu0.machTotal))),
		})
	}
	r.table(rows)
	for _, w := range wins {
		okN := float64(w.ok.Load())
		if okN > 0 {
			net := cmdStats{}
			for k, v := range w.cmds {
				net[k] = v - int64(float64(bg[k])/bgDur.Seconds()*w.elapsed.Seconds()+0.5)
			}
			r.printf("  %d/s: Redis commands per heartbeat, net of the baseline: %s\n", w.target, cmdBreakdown(net, okN))
		}
		var series []string
		for i, h := range w.perSec {
			if h.count.Load() > 0 {
				v := ms(h.quantile(0.99))
				if i < len(w.marks) && w.marks[i] != "" {
					v += "[" + w.marks[i] + "]"
				}
				series = append(series, v)
			}
		}
		r.printf("  %d/s: p99 of each second of the window ([gc]: a server GC cycle ended in that second, [gen-gc]: one of this generator's, [refresh]: a third or more of a background refresh pass ran in it): %s; GC cycles in the window: %.0f\n", w.target, strings.Join(series, " "), w.gcs)
		if sk := w.skipped.Load(); sk > 0 {
			r.printf("  %d/s: %d heartbeats not sent: their socket had been closed by the server\n", w.target, sk)
		}
		if len(w.errs) > 0 {
			r.printf("  %d/s: failed acks/sends (first ones): %s\n", w.target, strings.Join(w.errs, " | "))
		}
		if w.lostSock > 0 {
			r.printf("  %d/s: %d sockets closed by the server so far: %s\n", w.target, w.lostSock, w.lostWhy)
		}
		if w.perf != "" {
			r.printf("  %d/s: server profile (perf, cpu-clock):\n%s", w.target, w.perf)
		}
	}
	for _, w := range wins {
		name := fmt.Sprintf("hb_%d", w.target)
		r.figMs("heartbeat", name+"_p50", w.lat.quantile(0.5))
		r.figMs("heartbeat", name+"_p99", w.lat.quantile(0.99))
		r.fig("heartbeat", name+"_acked_per_s", float64(w.inWindow.Load())/w.dur.Seconds(), "acks/s", "higher")
		r.fig("heartbeat", name+"_other_processes_cpu", w.cpu0.others(w.cpu1).Seconds()/w.elapsed.Seconds(), "cores", "none")
		if okN := float64(w.ok.Load()); okN > 0 {
			r.fig("heartbeat", name+"_server_cpu_us", float64((w.cpu1.server-w.cpu0.server).Microseconds())/okN, "µs/hb", "lower")
		}
	}
	if len(wins) > 1 {
		best := 0
		for _, w := range wins {
			if w.pass(o) && w.target > best {
				best = w.target
			}
		}
		r.fig("heartbeat", "hb_max_rate_at_p99_target", float64(best), "hb/s", "higher")
		if best > 0 {
			r.printf("  highest rate meeting p99 < %s, achieved ≥ 95%% and < 0.1%% failures: %d heartbeats/s\n", o.p99Target, best)
		} else {
			r.printf("  no rate met p99 < %s with achieved ≥ 95%% and < 0.1%% failures\n", o.p99Target)
		}
	}
	r.printf("  pushes received in total: %s\n", pushes.String())
	if n, why := lost(live); n > 0 {
		r.printf("  %d sockets were closed by the server during the run: %s\n", n, why)
	}
	r.problems(e)
	return nil
}

// heartbeatWindow sends heartbeats at rate/s for dur over the sockets and
// measures them.
func heartbeatWindow(ctx context.Context, o *options, e *env, n *node, live []*conn, body []byte, rate int, dur time.Duration) *window {
	w := &window{target: rate, dur: dur}
	for i := 0; i < int(dur/time.Second)+1; i++ {
		w.perSec = append(w.perSec, &hist{})
	}
	W := min(o.workers, len(live))
	perW := float64(rate) / float64(W)
	var end time.Time
	var start time.Time
	cb := func(p []byte, sent, at time.Time) {
		lat := at.Sub(sent)
		w.lat.record(lat)
		if i := int(sent.Sub(start) / time.Second); i >= 0 && i < len(w.perSec) {
			w.perSec[i].record(lat)
		}
		if ackOK(p) {
			w.ok.Add(1)
		} else {
			w.failed.Add(1)
			w.errMu.Lock()
			if len(w.errs) < 5 {
				w.errs = append(w.errs, clip(p))
			}
			w.errMu.Unlock()
		}
		if lat > o.ackTimeout {
			w.late.Add(1)
		}
		if at.Before(end) {
			w.inWindow.Add(1)
		}
	}
	const evDur = `presenced_event_duration_seconds_`
	m0 := scrape(n.addr, evDur, "go_gc_duration_seconds_count")
	cs0, _ := e.commandStats(ctx)
	w.cpu0 = e.cpu(n.pid)
	var perfDone chan string
	if o.perf {
		perfDone = make(chan string, 1)
		go func() { perfDone <- perfProfile(n.pid, dur) }()
	}
	start = time.Now()
	end = start.Add(dur)
	// once a second: did a GC cycle end, did a third or more of the
	// background refresh run (its PEXPIREs: 4 keys per conversation in a
	// full pass; the server spreads the pass over 15 s)?
	fullPass := 4 * max(o.convsPer, o.sockets*o.convsPer/o.members)
	w.marks = make([]string, len(w.perSec))
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		prevGC := scrape(n.addr, "go_gc_duration_seconds_count")["go_gc_duration_seconds_count"]
		prevOwn := ownGCCycles()
		prevCS, _ := e.commandStats(ctx)
		for i := 0; i < len(w.marks); i++ {
			if time.Until(start.Add(time.Duration(i+1)*time.Second)) > 0 {
				time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second)))
			}
			if ctx.Err() != nil || time.Now().After(end.Add(time.Second)) {
				return
			}
			gc := scrape(n.addr, "go_gc_duration_seconds_count")["go_gc_duration_seconds_count"]
			cs, _ := e.commandStats(ctx)
			var m []string
			if gc > prevGC {
				m = append(m, "gc")
			}
			own := ownGCCycles()
			if own > prevOwn {
				m = append(m, "gen-gc")
			}
			prevOwn = own
			if cs["pexpire"]-prevCS["pexpire"] > int64(fullPass/3) {
				m = append(m, "refresh")
			}
			w.marks[i] = strings.Join(m, ",")
			prevGC, prevCS = gc, cs
		}
	}()
	var wg sync.WaitGroup
	for k := 0; k < W; k++ {
		var mine []*conn
		for i := k; i < len(live); i += W {
			mine = append(mine, live[i])
		}
		wg.Add(1)
		go func(mine []*conn, phase float64) {
			defer wg.Done()
			for j := 0; ; j++ {
				due := start.Add(time.Duration((float64(j) + phase) / perW * float64(time.Second)))
				if !due.Before(end) || ctx.Err() != nil {
					return
				}
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				c := mine[j%len(mine)]
				select {
				case <-c.done:
					w.skipped.Add(1)
					continue
				default:
				}
				w.sent.Add(1)
				if _, err := c.emitRaw(body, cb); err != nil {
					w.sendErr.Add(1)
					w.errMu.Lock()
					if len(w.errs) < 5 {
						w.errs = append(w.errs, "send: "+err.Error())
					}
					w.errMu.Unlock()
				}
			}
		}(mine, float64(k)/float64(W))
	}
	wg.Wait()
	<-samplerDone
	cs1, _ := e.commandStats(ctx)
	w.cpu1 = e.cpu(n.pid)
	m1 := scrape(n.addr, evDur, "go_gc_duration_seconds_count")
	w.gcs = m1["go_gc_duration_seconds_count"] - m0["go_gc_duration_seconds_count"]
	w.elapsed = w.cpu1.at.Sub(w.cpu0.at)
	w.cmds = cs1.sub(cs0).withoutOwn()
	sumK, cntK := evDur+`sum{event="heartbeat"}`, evDur+`count{event="heartbeat"}`
	if c := m1[cntK] - m0[cntK]; c > 0 {
		w.srvMean = time.Duration((m1[sumK] - m0[sumK]) / c * float64(time.Second))
	}
	// drain: wait for the outstanding acks, up to the timeout
	deadline := time.Now().Add(o.ackTimeout)
	for time.Now().Before(deadline) {
		out := 0
		for _, c := range live {
			out += c.pendingAcks()
		}
		if out == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var never int64
	for _, c := range live {
		never += int64(c.dropPending())
	}
	w.timeouts = never + w.late.Load()
	if perfDone != nil {
		w.perf = <-perfDone
	}
	return w
}

// checkHeartbeatAck checks {ok: true, serverTime: RFC 3339 UTC with ms,
// nextInMs: interval + jitter}.
func checkHeartbeatAck(raw json.RawMessage, err error) string {
	if err != nil {
		return "ERROR " + err.Error()
	}
	var a struct {
		OK         *bool    `json:"ok"`
		ServerTime *string  `json:"serverTime"`
		NextInMs   *float64 `json:"nextInMs"`
	}
	if json.Unmarshal(raw, &a) != nil || a.OK == nil || !*a.OK || a.ServerTime == nil || a.NextInMs == nil {
		return "WRONG: " + clip(raw)
	}
	t, perr := time.Parse("2006-01-02T15:04:05.000Z", *a.ServerTime)
	if perr != nil {
		return "WRONG serverTime: " + clip(raw)
	}
	if d := time.Since(t); d > 5*time.Second || d < -5*time.Second {
		return "WRONG serverTime (clock): " + clip(raw)
	}
	if *a.NextInMs < 15000 || *a.NextInMs > 20000 {
		return "UNEXPECTED nextInMs (default interval 15s + jitter < 5s): " + clip(raw)
	}
	return "OK " + clip(raw)
}

// checkJoinAck checks {ok: true, conversationId, online: [Member], typing: []}.
func checkJoinAck(raw json.RawMessage, err error, conv string) string {
	if err != nil {
		return "ERROR " + err.Error()
	}
	var a struct {
		OK             bool   `json:"ok"`
		ConversationID string `json:"conversationId"`
		Online         []struct {
			UserID string  `json:"userId"`
			Status string  `json:"status"`
			Since  *string `json:"since"` // null unless the user's last-seen setting is everyone
		} `json:"online"`
		Typing []string `json:"typing"`
	}
	if json.Unmarshal(raw, &a) != nil || !a.OK || a.ConversationID != conv || a.Online == nil || a.Typing == nil {
		return "WRONG: " + clip(raw)
	}
	for _, m := range a.Online {
		if m.UserID == "" || (m.Status != "online" && m.Status != "away") || (m.Since != nil && *m.Since == "") {
			return "WRONG member: " + clip(raw)
		}
	}
	return fmt.Sprintf("OK (%d online members listed)", len(a.Online))
}

// foreignTraffic compares the INFO count of a window with what MONITOR
// saw of the benchmark's key prefix: the difference is other clients of a
// shared Redis, which the INFO-based figures cannot tell apart.
func foreignTraffic(a anatomy, info cmdStats, d time.Duration) string {
	top, lua := a.totals()
	ours := float64(top+lua) / d.Seconds()
	all := float64(info.total()) / d.Seconds()
	other := max(0, all-ours)
	s := fmt.Sprintf("of which MONITOR attributes %.0f/s to the key prefix (the servers under test) and %.0f/s to other clients of this Redis", ours, other)
	if other > 0.05*all+5 {
		s += " — the INFO commandstats figures below are polluted by them; use -redis own for clean counts (the MONITOR anatomy is exact either way)"
	}
	return s
}

func extraFlags(o *options) string {
	s := ""
	if len(o.serverFlags) > 0 {
		s = "; extra server flags: " + strings.Join(o.serverFlags, " ")
	}
	if browserHeaders {
		s += "; handshakes with a browser's headers (-browser-headers)"
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// ownGCCycles is the number of collections this generator has finished.
func ownGCCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
