//go:build linux

// Command presence-load is a load generator for presenced. It speaks
// Engine.IO v4 / Socket.IO v5 over websockets itself (one reader goroutine
// per socket, so one process holds 10,000 sockets), starts the server
// nodes as child processes in cluster mode against Redis and a fresh
// PostgreSQL database, and measures (Linux only: it reads /proc and sets
// the children's parent-death signal):
//
//   - heartbeat: N sockets (one user each) join 3 conversations of about
//     100 members, then send `heartbeat` at a steady aggregate rate R for a
//     fixed time (or at several rates, -rates), measuring each ack's
//     latency, errors and timeouts; Redis commands per heartbeat (INFO
//     commandstats, less an idle baseline window, and a MONITOR sample of
//     one heartbeat's anatomy); server memory per socket; CPU time of the
//     server, Redis and this generator.
//
//   - subscribe: two nodes, 1,000 subscribers of one user T spread over
//     both; T connects and disconnects repeatedly and the delivery latency
//     of each presence:update to each subscriber is measured; then
//     presence:query latency and Redis commands for 200 and 1,000 ids.
//
// Usage:
//
//	go build -o bin/presenced ./cmd/presenced
//	go run ./cmd/presence-load [-scenario all|heartbeat|subscribe] [flags]
//	go run ./cmd/presence-load -scenario heartbeat -rates 1k,2k,3k,5k,10k -redis own -perf
//
// With the defaults (10,000 sockets, 20,000 heartbeats/s for 30s, then the
// subscribe scenario) a run takes about three minutes; most of it is the
// server accepting the sockets and fanning out their presence:join events.
// -redis own starts a private redis-server so that INFO commandstats counts
// only the servers under test (a shared Redis used by other programs
// pollutes them; the report says so, and the MONITOR samples, filtered by
// the key prefix, are exact either way). -perf samples the server with
// `perf record` during each heartbeat window. -server-flags passes extra
// flags to the nodes. The figures of runs on the project's 2-core machine
// are in docs/benchmarks/presence-load.md.
//
// Everything it creates (child processes, the database, the Redis keys
// under its random prefix or a private redis-server) is removed at the
// end, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	scenario    string
	scenarios   map[string]bool
	server      string // "presenced" or "node" (the Node peer, bench/server.js)
	peerCmd     string
	jsonOut     bool
	quick       bool
	tty         bool // stdout is a terminal: a progress line on stderr
	serverBin   string
	redis       string
	redisServer string
	pgAdminURL  string
	basePort    int
	keepLogs    bool
	verbose     bool
	out         string
	perf        bool
	serverLog   string
	serverFlags []string

	// heartbeat
	sockets      int
	members      int
	convsPer     int
	connectRate  int
	inflight     int
	rate         int
	rates        []int
	duration     time.Duration
	stepDuration time.Duration
	baseline     time.Duration
	ackTimeout   time.Duration
	workers      int
	active       bool
	settle       time.Duration
	p99Target    time.Duration
	stepStop     bool

	// subscribe
	subscribers int
	flaps       int
	flapGrace   time.Duration
	queries     int
	querySizes  []int

	// idle
	idleSockets int

	// typing
	typingRooms   int
	typingMembers int
	typingRates   []int
	typingDur     time.Duration
	typingNodes   []int
}

// generatorGOGC is the generator's own GC setting when GOGC is not in the
// environment: its heap is small and short-lived, and each of its GC
// cycles delays its readers, so they would time acks late (the server
// keeps Go's default: the tool does not pass this on). The typing windows
// and the heartbeat steps go further: no collection at all while they run
// (pauseGC).
const generatorGOGC = 400

// pauseGC stops the generator's collections until the returned func is
// called, unless GOGC is in the environment (the caller's setting then
// holds): a collection first, so that the pause starts from the live heap,
// then none until the heap reaches generatorMemLimit. A typing window
// receives up to 45,000 deliveries a second and times each: with GOGC=400,
// a runtime trace of server and generator side by side (100 changes/s, one
// node) put each stall of 30-55 ms in the generator's ack times on one of
// its own mark phases (40-50 ms on both vCPUs every 2-3 s), none on the
// server's. Not for whole runs: with collections off throughout, the
// generator used 0.06 cores more at 20,000 heartbeats/s (fresh memory for
// every allocation) and timed the setup's join acks about twice as late.
// The heartbeat steps pause it too: in side-by-side run BD the slowest
// seconds of a 40,000/s step (p99 74 and 140 ms against 2-20 in the
// others) were those of one of the generator's collections, and they
// decided the step; a step's own allocations are small (a few MB).
func pauseGC() (resume func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	runtime.GC()
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(generatorMemLimit(memTotal()))
	return func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	}
}

// generatorMemLimit is the heap at which the generator collects while its
// collections are paused: a quarter of the machine's memory, between 1 and
// 8 GiB (2 GiB where the machine's memory is not known).
func generatorMemLimit(total int64) int64 {
	if total <= 0 {
		return 2 << 30
	}
	return min(8<<30, max(1<<30, total/4))
}

// memTotal is the machine's memory in bytes (0 if unknown).
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(generatorGOGC)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "presence-load:", err)
		os.Exit(1)
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		if strings.HasSuffix(f, "k") {
			mult, f = 1000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	var rates, sizes string
	fs := flag.NewFlagSet("presence-load", flag.ContinueOnError)
	fs.StringVar(&o.scenario, "scenario", "all", "comma-separated: idle, heartbeat, typing, subscribe; all = heartbeat,subscribe; side = idle,heartbeat,typing,subscribe")
	fs.StringVar(&o.server, "server", "presenced", `server under test: "presenced" (-server-bin) or "node" (the Node peer started with -peer-cmd)`)
	fs.StringVar(&o.peerCmd, "peer-cmd", "node bench/server.js", "-server node: the command starting one Node peer node (it gets presenced's flags: --addr, --jwt-secret, --redis-url, --redis-prefix, …)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the figures as JSON on stdout (the text report goes to stderr, and to -out)")
	fs.BoolVar(&o.quick, "quick", false, "smoke run (~1 min per server): small counts and short windows for every flag not given explicitly")
	fs.StringVar(&o.serverBin, "server-bin", "bin/presenced", "presenced binary to start (build it with: go build -o bin/presenced ./cmd/presenced)")
	fs.StringVar(&o.redis, "redis", "redis://127.0.0.1:6379", `Redis URL, or "own" to start a private redis-server (exact command counts when the shared Redis is busy)`)
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary for -redis own")
	fs.StringVar(&o.pgAdminURL, "pg", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL used to create and drop the benchmark database")
	fs.IntVar(&o.basePort, "port", 0, "first server port (0: free ports)")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the server logs (their directory is printed)")
	fs.BoolVar(&o.verbose, "v", false, "progress on stderr")
	fs.StringVar(&o.out, "out", "", "also write the report to this file")
	fs.BoolVar(&o.perf, "perf", false, "profile the server with perf record (cpu-clock) during each heartbeat window and print its hottest functions")

	fs.StringVar(&o.serverLog, "server-log-level", "warn", "the servers' --log-level (their WARN/ERROR lines are summarised in the report)")
	fs.Func("server-flags", `extra flags for every server node, space-separated (e.g. "--ping-interval 2s --ping-timeout 2s")`, func(v string) error {
		o.serverFlags = append(o.serverFlags, strings.Fields(v)...)
		return nil
	})
	fs.IntVar(&o.sockets, "n", 10000, "heartbeat: sockets (one user each)")
	fs.IntVar(&o.members, "members", 100, "heartbeat: members per conversation")
	fs.IntVar(&o.convsPer, "convs", 3, "heartbeat: conversations joined by each socket")
	fs.IntVar(&o.connectRate, "connect-rate", 500, "new sockets per second")
	fs.IntVar(&o.inflight, "inflight", 200, "most sockets in their handshake and joins at once")
	fs.IntVar(&o.rate, "rate", 20000, "heartbeat: aggregate heartbeats per second")
	fs.StringVar(&rates, "rates", "", "heartbeat step mode: comma-separated rates (e.g. 5k,10k,20k,30k), each run for -step-duration")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "heartbeat: length of the measured window at -rate")
	fs.DurationVar(&o.stepDuration, "step-duration", 15*time.Second, "heartbeat step mode: length of each step")
	fs.DurationVar(&o.baseline, "baseline", 15*time.Second, "heartbeat: idle window measuring the server's background Redis traffic (keep it a multiple of TTL/3 = 15s)")
	fs.DurationVar(&o.ackTimeout, "ack-timeout", 5*time.Second, "an ack later than this (or never) is a timeout")
	fs.IntVar(&o.workers, "workers", 16, "heartbeat: pacing goroutines (each sends to its share of the sockets)")
	fs.BoolVar(&o.active, "active", true, "heartbeat: send {active:true} (false: {active:false})")
	fs.DurationVar(&o.settle, "settle", 90*time.Second, "heartbeat: after the setup, wait at most this long for the presence:join fan-out to stop arriving before measuring")
	fs.DurationVar(&o.p99Target, "p99", 50*time.Millisecond, "heartbeat step mode: a rate passes when p99 is below this, the achieved rate is ≥95% of the target and under 0.1% of heartbeats fail")

	fs.BoolVar(&o.stepStop, "step-stop", true, "heartbeat step mode: skip the higher rates once a rate overloads the server (p99 > 20× the target or > 1% failures)")
	fs.IntVar(&o.subscribers, "subscribers", 1000, "subscribe: subscriber sockets (spread over 2 nodes)")
	fs.IntVar(&o.flaps, "flaps", 20, "subscribe: connect/disconnect cycles of the target user")
	fs.DurationVar(&o.flapGrace, "flap-grace", 200*time.Millisecond, "subscribe: the servers' --flap-grace")
	fs.IntVar(&o.queries, "queries", 200, "subscribe: presence:query calls per size")
	fs.StringVar(&sizes, "query-sizes", "200,1000", "subscribe: ids per presence:query")
	fs.IntVar(&o.idleSockets, "idle-n", 10000, "idle: sockets connected without joining anything (memory per idle socket, connect rate)")
	fs.BoolVar(&browserHeaders, "browser-headers", false, "every websocket handshake sends the headers of a desktop browser (user agent, languages, cache directives and a 1 KB cookie) as well, as a browser's socket.io-client does")
	fs.IntVar(&o.typingRooms, "typing-rooms", 20, "typing: conversations")
	fs.IntVar(&o.typingMembers, "typing-members", 100, "typing: sockets (one user each) per conversation")
	var typingRates string
	fs.StringVar(&typingRates, "typing-rates", "500", "typing: comma-separated rates of typing:start/typing:stop events per second (all senders together), one window each")
	fs.DurationVar(&o.typingDur, "typing-duration", 20*time.Second, "typing: length of the measured window")
	var typingNodes string
	fs.StringVar(&typingNodes, "typing-nodes", "1,2", "typing: node counts to run the scenario with")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.quick {
		applyQuick(fs)
	}
	var err error
	if o.typingNodes, err = parseInts(typingNodes); err != nil {
		return err
	}
	if o.typingRates, err = parseInts(typingRates); err != nil {
		return err
	}
	if o.scenarios, err = parseScenarios(o.scenario); err != nil {
		return err
	}
	o.tty = isTerminal(os.Stdout)
	if rates != "" {
		if o.rates, err = parseInts(rates); err != nil {
			return err
		}
	}
	if o.querySizes, err = parseInts(sizes); err != nil {
		return err
	}
	if o.convsPer*o.sockets < o.members {
		o.members = o.convsPer * o.sockets
	}
	switch o.server {
	case "presenced":
		if _, err := os.Stat(o.serverBin); err != nil {
			return fmt.Errorf("server binary %s: %w (build it: go build -o bin/presenced ./cmd/presenced)", o.serverBin, err)
		}
	case "node":
		f := strings.Fields(o.peerCmd)
		if len(f) == 0 {
			return fmt.Errorf("-peer-cmd is empty")
		}
		if _, err := exec.LookPath(f[0]); err != nil {
			return fmt.Errorf("-peer-cmd: %w", err)
		}
	default:
		return fmt.Errorf("unknown -server %q (presenced or node)", o.server)
	}
	if o.redis == "own" {
		if p, err := exec.LookPath(o.redisServer); err != nil {
			return fmt.Errorf("-redis own: %w", err)
		} else {
			o.redisServer = p
		}
	}
	nofile, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	most := 0
	if o.scenarios["heartbeat"] {
		most = o.sockets
	}
	if o.scenarios["idle"] {
		most = max(most, o.idleSockets)
	}
	if o.scenarios["typing"] {
		most = max(most, o.typingRooms*o.typingMembers)
	}
	if need := uint64(most + 200); nofile < need {
		return fmt.Errorf("RLIMIT_NOFILE is %d (hard limit), %d sockets need about %d", nofile, most, need)
	}

	text := stdout
	if o.jsonOut {
		text = os.Stderr
	}
	r := &report{opt: &o, w: text, started: time.Now()}
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		r.w = io.MultiWriter(text, f)
	}
	r.conditions = conditions(&o, nofile)
	r.header(r.conditions)

	var errs []string
	for _, sc := range scenarioOrder {
		if !o.scenarios[sc.name] || ctx.Err() != nil {
			continue
		}
		t0 := time.Now()
		if err := sc.run(ctx, &o, r); err != nil {
			errs = append(errs, sc.name+": "+err.Error())
			r.failed = append(r.failed, sc.name+": "+err.Error())
			r.printf("\n%s scenario FAILED: %v\n", sc.name, err)
		} else {
			r.done = append(r.done, sc.name)
		}
		r.printf("  (%s scenario took %s)\n", sc.name, time.Since(t0).Round(time.Second))
	}
	o.clearProgress()
	if o.jsonOut {
		if err := r.writeJSON(stdout); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return ctx.Err()
}

// scenarioOrder is the order the scenarios run in.
var scenarioOrder = []struct {
	name string
	run  func(context.Context, *options, *report) error
}{
	{"idle", runIdle},
	{"heartbeat", runHeartbeat},
	{"typing", runTyping},
	{"subscribe", runSubscribe},
}

func parseScenarios(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "all":
			out["heartbeat"], out["subscribe"] = true, true
		case "side":
			for _, sc := range scenarioOrder {
				out[sc.name] = true
			}
		case "idle", "heartbeat", "typing", "subscribe":
			out[f] = true
		case "":
		default:
			return nil, fmt.Errorf("unknown -scenario %q", f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario in -scenario %q", s)
	}
	return out, nil
}

// quickDefaults are the -quick values of the flags not given explicitly.
var quickDefaults = map[string]string{
	"n": "2000", "rates": "1k,2k,4k", "step-duration": "5s", "duration": "5s", "baseline": "3s",
	"subscribers": "200", "flaps": "5", "queries": "30", "query-sizes": "1000",
	"settle": "20s", "idle-n": "2000", "typing-rooms": "10", "typing-members": "50", "typing-rates": "200", "typing-duration": "5s",
}

func applyQuick(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range quickDefaults {
		if !set[name] {
			_ = fs.Set(name, v)
		}
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// conditions describes the machine and the versions.
func conditions(o *options, nofile uint64) []string {
	var lines []string
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var mem string
	if t := memTotal(); t > 0 {
		mem = fmt.Sprintf("%d kB", t>>10)
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	bin, _ := filepath.Abs(o.serverBin)
	srvVer := ""
	if out, err := exec.Command("go", "version", o.serverBin).Output(); err == nil {
		srvVer = strings.TrimSpace(string(out))
		if i := strings.LastIndex(srvVer, ": "); i >= 0 {
			srvVer = srvVer[i+2:]
		}
	}
	b0, t0 := machineCPU()
	time.Sleep(2 * time.Second)
	b1, t1 := machineCPU()
	lines = append(lines,
		fmt.Sprintf("machine: %d CPUs (%s), %s RAM, Linux %s; server, Redis, PostgreSQL and this load generator all share these CPUs, over loopback",
			runtime.NumCPU(), model, mem, kernel),
		fmt.Sprintf("generator: %s, GOMAXPROCS %d, %s, RLIMIT_NOFILE %d", runtime.Version(), runtime.GOMAXPROCS(0), gcSetting(), nofile),
		serverLine(o, bin, srvVer),
		fmt.Sprintf("started: %s; the machine was %s busy (other programs) in the 2s before", time.Now().UTC().Format(time.RFC3339), pct(float64(b1-b0), float64(t1-t0))),
	)
	return lines
}

// gcSetting describes the generator's collector.
func gcSetting() string {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	if os.Getenv("GOGC") != "" {
		return fmt.Sprintf("GOGC %d (from the environment)", p)
	}
	return fmt.Sprintf("GOGC %d, no collection during a typing window or a heartbeat step (up to a %.1f GiB heap)", p, float64(generatorMemLimit(memTotal()))/(1<<30))
}

// serverLine names the server under test.
func serverLine(o *options, bin, srvVer string) string {
	if o.server != "node" {
		commit := ""
		if out, err := exec.Command("go", "version", "-m", o.serverBin).Output(); err == nil {
			for _, l := range strings.Split(string(out), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), "build\tvcs.revision="); ok {
					commit = ", commit " + v
				}
				if strings.TrimSpace(l) == "build\tvcs.modified=true" {
					commit += " (modified tree)"
				}
			}
		}
		return fmt.Sprintf("server: presenced %s (built with %s%s)", bin, srvVer, commit)
	}
	ver := ""
	if f := strings.Fields(o.peerCmd); len(f) > 0 {
		if out, err := exec.Command(f[0], "--version").Output(); err == nil {
			ver = strings.TrimSpace(string(out))
		}
	}
	return fmt.Sprintf("server: Node peer `%s` (%s; socket.io, @socket.io/redis-adapter and redis as locked in bench/package-lock.json)", o.peerCmd, ver)
}
