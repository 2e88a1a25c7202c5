package adapter_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"

	"github.com/presenced/presenced/adapter"
)

// BenchmarkBroadcast measures a broadcast to a room of 1,000 members, half on
// the sending node and half on another (and, to see the adapter's own cost
// without the fan-out, of 2 members), over a redis-server of its own:
//
//	go test -run '^$' -bench Broadcast -benchtime 200x ./adapter/
//
// paced: one broadcast at a time, each waited for at every member;
// burst: b.N broadcasts back to back. Reported: per-member latency p50/p99,
// same node ("local") and across Redis ("remote"); deliveries per second
// (burst); Redis commands per broadcast (INFO commandstats delta).
func BenchmarkBroadcast(b *testing.B) {
	for _, m := range modes() {
		for _, members := range []int{1000, 2} {
			b.Run(fmt.Sprintf("%s/members=%d", m.name, members), func(b *testing.B) { benchBroadcast(b, m.sharded, members) })
		}
	}
}

type benchRig struct {
	srv        *redistest.Proc
	rdb        *redis.Client
	n1, n2     *goNode
	local      []*wsClient
	remote     []*wsClient
	received   atomic.Int64
	runCounter int
	members    int
	obs        countingObserver
}

func newBenchRig(b *testing.B, sharded bool, members int) *benchRig {
	r := &benchRig{srv: redistest.StartProc(b), members: members}
	r.rdb = redis.NewClient(&redis.Options{Addr: r.srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 4})
	b.Cleanup(func() { r.rdb.Close() })
	// A generous publish timeout: on a saturated machine a batch can take
	// over a second, and a publish that times out is dropped by design.
	cfg := adapter.Config{Prefix: "bench", Sharded: sharded, Observer: &r.obs, PublishTimeout: 5 * time.Second}
	r.n1 = startGoNode(b, "n1", r.rdb, cfg)
	r.n2 = startGoNode(b, "n2", r.rdb, cfg)
	waitCluster(b, r.n1, r.n2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, 16)
	for i := range members {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n := r.n1
			if i%2 == 1 {
				n = r.n2
			}
			c, err := tryDial(b, n.url, "m"+strconv.Itoa(i), clientOpts{auth: auth("u"+strconv.Itoa(i), "big"), timing: true, counter: &r.received})
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			if n == r.n1 {
				r.local = append(r.local, c)
			} else {
				r.remote = append(r.remote, c)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	waitRooms(b, r.n1, r.n2)
	return r
}

func (r *benchRig) waitReceived(b *testing.B, target int64) {
	deadline := time.Now().Add(60 * time.Second)
	for r.received.Load() < target {
		if time.Now().After(deadline) {
			closed := 0
			for _, c := range append(append([]*wsClient{}, r.local...), r.remote...) {
				if c.isClosed() {
					closed++
				}
			}
			b.Fatalf("received %d of %d deliveries (%d members disconnected, %d publishes failed, last error %v)",
				r.received.Load(), target, closed, r.obs.failed.Load(), r.obs.err())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func commandStats(b *testing.B, rdb *redis.Client) map[string]int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_publish:calls=12,usec=...
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(calls, 10, 64)
	}
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func latencies(clients []*wsClient, ev string, sent []time.Time) []time.Duration {
	var out []time.Duration
	for _, c := range clients {
		for i, at := range c.times(ev) {
			if i < len(sent) {
				out = append(out, at.Sub(sent[i]))
			}
		}
		c.resetTimes()
	}
	return out
}

func lastReceipt(clients []*wsClient, ev string) time.Time {
	var last time.Time
	for _, c := range clients {
		if t := c.times(ev); len(t) > 0 && t[len(t)-1].After(last) {
			last = t[len(t)-1]
		}
	}
	return last
}

func benchBroadcast(b *testing.B, sharded bool, members int) {
	r := newBenchRig(b, sharded, members)
	payload := map[string]any{"conversationId": "c-123", "userId": "u-456", "at": "2026-01-02T03:04:05.678Z"}

	report := func(b *testing.B, ev string, sent []time.Time, elapsed time.Duration, cmds map[string]int64) {
		if len(sent) > 1 {
			start := sent[0]
			lastLocal, lastRemote := lastReceipt(r.local, ev), lastReceipt(r.remote, ev)
			b.ReportMetric(float64(len(sent)*len(r.local))/lastLocal.Sub(start).Seconds(), "local-deliveries/s")
			b.ReportMetric(float64(len(sent)*len(r.remote))/lastRemote.Sub(start).Seconds(), "remote-deliveries/s")
		}
		local := latencies(r.local, ev, sent)
		remote := latencies(r.remote, ev, sent)
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
		b.ReportMetric(us(percentile(local, 0.50)), "local-p50-µs")
		b.ReportMetric(us(percentile(local, 0.99)), "local-p99-µs")
		b.ReportMetric(us(percentile(remote, 0.50)), "remote-p50-µs")
		b.ReportMetric(us(percentile(remote, 0.99)), "remote-p99-µs")
		var total int64
		for name, n := range cmds {
			if name != "info" {
				total += n
			}
		}
		b.ReportMetric(float64(total)/float64(len(sent)), "redis-cmds/op")
		b.ReportMetric(float64(cmds["publish"]+cmds["spublish"])/float64(len(sent)), "publishes/op")
	}
	diff := func(before, after map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				out[k] = d
			}
		}
		return out
	}

	// paced waits for each broadcast at every member before the next;
	// otherwise the broadcasts go back to back and are waited for at the end.
	run := func(b *testing.B, evPrefix string, paced bool) {
		r.runCounter++
		ev := fmt.Sprintf("%s%d", evPrefix, r.runCounter)
		r.received.Store(0)
		before := commandStats(b, r.rdb)
		sent := make([]time.Time, 0, b.N)
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			sent = append(sent, time.Now())
			r.n1.io.To("big").Emit(ev, i, payload)
			if paced {
				r.waitReceived(b, int64((i+1)*r.members))
			}
		}
		if !paced {
			r.waitReceived(b, int64(b.N*r.members))
		}
		elapsed := time.Since(start)
		b.StopTimer()
		report(b, ev, sent, elapsed, diff(before, commandStats(b, r.rdb)))
	}
	b.Run("paced", func(b *testing.B) { run(b, "p", true) })
	b.Run("burst", func(b *testing.B) { run(b, "b", false) })
}
