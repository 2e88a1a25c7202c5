//go:build linux

package main

import (
	"context"
	"fmt"
	"time"
)

// runIdle connects -idle-n sockets (one user each) to one node without
// joining anything, as fast as -connect-rate and -inflight allow: the
// connect rate, the handshake latency and the server's memory per idle
// socket.
func runIdle(ctx context.Context, o *options, r *report) error {
	e, n, err := oneNode(ctx, o, "idle")
	if err != nil {
		return err
	}
	defer e.close()
	N := o.idleSockets
	r.printf("\n== idle scenario: connect rate and memory per idle socket ==\n")
	r.printf("  Redis %s at %s, key prefix %s; one node (pid %d) at %s%s\n", e.redisVer, e.redisURL, e.prefix, n.pid, n.addr, extraFlags(o))
	r.printf("  %d sockets, one user each, no conversation; connect rate ≤ %d/s, ≤ %d handshakes in flight\n", N, o.connectRate, o.inflight)

	time.Sleep(time.Second)
	rss0 := rssKB(n.pid)
	spec := fleetSpec{
		count: N, rate: o.connectRate,
		addr: func(int) (string, int) { return n.addr, 0 },
		user: func(i int) string { return fmt.Sprintf("idle%d", i) },
	}
	var fs fleetStats
	o.logf("idle: connecting %d sockets", N)
	conns, c0, c1 := openFleetOn(ctx, e, n, spec, &fs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	live := len(connected(conns))
	rate := float64(live) / fs.elapsed.Seconds()
	r.printf("  %d/%d sockets connected in %s: %.0f sockets/s; connect (websocket + CONNECT + session event) %s; %d failed%s\n",
		live, N, fs.elapsed.Round(time.Millisecond), rate, fs.connect.summary(), fs.failed.Load(), fs.errorSummary())
	r.printf("  CPU while connecting: %s\n", cpuLine(c0, c1))
	if live == 0 {
		return fmt.Errorf("no socket connected")
	}
	o.logf("idle: settling")
	sleepCtx(ctx, 5*time.Second)
	rss1 := rssKB(n.pid)
	perSock := float64(rss1-rss0) / float64(live)
	r.printf("  server memory: VmRSS %.1f MiB before → %.1f MiB with %d idle sockets (5 s later): %.1f KiB per socket\n",
		float64(rss0)/1024, float64(rss1)/1024, live, perSock)
	if k, why := lost(conns); k > 0 {
		r.printf("  %d sockets were closed by the server: %s\n", k, why)
	}
	r.fig("idle", "connect_rate", rate, "sockets/s", "higher")
	r.figHist("idle", "connect", &fs.connect)
	r.fig("idle", "rss_idle_per_socket", perSock, "KiB", "lower")
	r.fig("idle", "rss_idle_total", float64(rss1)/1024, "MiB", "lower")
	r.fig("idle", "other_processes_cpu", c0.others(c1).Seconds()/c1.at.Sub(c0.at).Seconds(), "cores", "none")
	r.fig("idle", "connect_failed", float64(fs.failed.Load()), "sockets", "lower")
	r.fig("idle", "connect_server_cpu_per_socket", float64((c1.server-c0.server).Microseconds())/float64(live), "µs", "lower")
	r.problems(e)
	return nil
}

// oneNode prepares the database and Redis for a scenario and starts one
// server node; the caller closes the env.
func oneNode(ctx context.Context, o *options, scenario string) (*env, *node, error) {
	o.logf("%s: preparing database and Redis", scenario)
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	n, err := e.startNode(ctx)
	if err != nil {
		e.close()
		return nil, nil, err
	}
	return e, n, nil
}
