//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// env is what a scenario runs against: a fresh PostgreSQL database, a Redis
// (the shared one under a fresh key prefix, or a private redis-server), and
// presenced nodes started as child processes. close undoes all of it.
type env struct {
	opt      *options
	id       string // random suffix of the prefix and database name
	dir      string // temporary directory (logs, redis working dir)
	secret   string
	prefix   string
	dbName   string
	dbURL    string
	redisURL string

	rdb       *redis.Client
	redisPID  int
	redisVer  string
	ownRedis  *exec.Cmd
	pgVersion string

	nodes []*node

	afterStop []func() // run once the nodes are stopped (drop the client sockets)
}

type node struct {
	idx     int
	addr    string
	cmd     *exec.Cmd
	pid     int
	logPath string
	logFile *os.File
	exited  chan struct{}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newEnv prepares the database and Redis. The nodes are started by the
// scenario (startNode).
func newEnv(ctx context.Context, opt *options) (_ *env, err error) {
	e := &env{opt: opt, id: randHex(4), secret: "load-" + randHex(16)}
	e.prefix = "bench-" + e.id
	e.dbName = "bench_load_" + e.id
	e.dir, err = os.MkdirTemp("", "presence-load-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()

	// Redis
	if opt.redis == "own" {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		e.ownRedis = exec.Command(opt.redisServer, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", e.dir, "--maxclients", "20000")
		e.ownRedis.Stdout, e.ownRedis.Stderr = io.Discard, io.Discard
		e.ownRedis.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := e.ownRedis.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", opt.redisServer, err)
		}
		e.redisURL = fmt.Sprintf("redis://127.0.0.1:%d", port)
	} else {
		e.redisURL = opt.redis
	}
	ropt, err := redis.ParseURL(e.redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	e.rdb = redis.NewClient(ropt)
	var pingErr error
	for i := 0; i < 50; i++ {
		if pingErr = e.rdb.Ping(ctx).Err(); pingErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pingErr != nil {
		return nil, fmt.Errorf("redis %s: %w", e.redisURL, pingErr)
	}
	if e.ownRedis != nil {
		// Redis 7 keeps a latency histogram for each command once it is
		// first called, about 24 KB each, counted in used_memory: a cost
		// per kind of command, not per user, that the setup of a server
		// using more kinds of commands would put on its bytes per user
		// (about 1 MB, 100 bytes a user at 5,000 users). Off here, on the
		// private Redis only (an error from an older Redis is ignored:
		// it has no such histograms).
		_ = e.rdb.ConfigSet(ctx, "latency-tracking", "no").Err()
		_ = e.rdb.ConfigResetStat(ctx).Err()
	}
	info, err := e.rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, err
	}
	e.redisVer = infoField(info, "redis_version")
	e.redisPID, _ = strconv.Atoi(infoField(info, "process_id"))
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/stat", e.redisPID)); err != nil {
		e.redisPID = 0 // not on this machine (or not visible): no CPU figure
	}

	// PostgreSQL: a fresh database
	admin, err := pgx.Connect(ctx, opt.pgAdminURL)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", opt.pgAdminURL, err)
	}
	defer admin.Close(context.Background())
	_ = admin.QueryRow(ctx, "SHOW server_version").Scan(&e.pgVersion)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+e.dbName); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(opt.pgAdminURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + e.dbName
	e.dbURL = u.String()
	return e, nil
}

// startNode starts one presenced child process and waits for /readyz.
func (e *env) startNode(ctx context.Context, extra ...string) (*node, error) {
	port := e.opt.basePort
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		port = p
	} else {
		port += len(e.nodes)
	}
	n := &node{idx: len(e.nodes), addr: fmt.Sprintf("127.0.0.1:%d", port), exited: make(chan struct{})}
	n.logPath = filepath.Join(e.dir, fmt.Sprintf("node%d.log", n.idx))
	f, err := os.Create(n.logPath)
	if err != nil {
		return nil, err
	}
	n.logFile = f
	args := []string{"serve",
		"--jwt-secret", e.secret,
		"--membership", "open",
		"--redis-url", e.redisURL,
		"--redis-prefix", e.prefix,
		"--database-url", e.dbURL,
		"--addr", n.addr,
		"--handshake-limit", "0",
		// the presence:query scenario sends its queries back to back from
		// one socket: over the per-socket query limit of production
		"--query-limit", "0",
		"--log-level", e.opt.serverLog,
		"--log-format", "json",
		"--node-id", fmt.Sprintf("load-%s-%d", e.id, n.idx),
		"--shutdown-timeout", "5s",
	}
	args = append(args, extra...)
	args = append(args, e.opt.serverFlags...)
	bin := e.opt.serverBin
	if e.opt.server == "node" {
		// the Node peer takes the same flags (it ignores those it has no use for)
		f := strings.Fields(e.opt.peerCmd)
		bin, args = f[0], append(f[1:len(f):len(f)], args...)
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	n.pid = n.cmd.Process.Pid
	e.nodes = append(e.nodes, n)
	go func() { _ = n.cmd.Wait(); close(n.exited) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-n.exited:
			return nil, fmt.Errorf("node %d exited at start; log:\n%s", n.idx, tail(n.logPath, 20))
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		resp, err := http.Get("http://" + n.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %d not ready after 30s; log:\n%s", n.idx, tail(n.logPath, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends a node: SIGTERM, then SIGKILL after the grace.
func (n *node) stop(grace time.Duration) {
	select {
	case <-n.exited:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(grace):
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	}
	n.logFile.Close()
}

// close stops the nodes, drops the database and the Redis keys, stops a
// private Redis and removes the temporary directory.
func (e *env) close() {
	for _, n := range e.nodes {
		n.stop(10 * time.Second)
	}
	for _, f := range e.afterStop {
		f()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.dbURL != "" {
		if admin, err := pgx.Connect(ctx, e.opt.pgAdminURL); err == nil {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)"); err != nil {
				fmt.Fprintln(os.Stderr, "presence-load: drop database:", err)
			}
			admin.Close(ctx)
		} else {
			fmt.Fprintln(os.Stderr, "presence-load: drop database:", err)
		}
	}
	if e.rdb != nil {
		if e.ownRedis == nil && e.prefix != "" {
			n, err := deletePrefix(ctx, e.rdb, e.prefix)
			if err != nil {
				fmt.Fprintln(os.Stderr, "presence-load: delete redis keys:", err)
			} else if e.opt.verbose {
				fmt.Fprintf(os.Stderr, "presence-load: deleted %d redis keys under %s\n", n, e.prefix)
			}
		}
		e.rdb.Close()
	}
	if e.ownRedis != nil && e.ownRedis.Process != nil {
		_ = e.ownRedis.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = e.ownRedis.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = e.ownRedis.Process.Kill()
			<-done
		}
	}
	if e.dir != "" && !e.opt.keepLogs {
		os.RemoveAll(e.dir)
	} else if e.dir != "" {
		fmt.Fprintln(os.Stderr, "presence-load: server logs kept in", e.dir)
	}
}

func deletePrefix(ctx context.Context, rdb *redis.Client, prefix string) (int, error) {
	var n int
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+":*", 1000).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return n, err
			}
			n += len(keys)
		}
		cursor = next
		if cursor == 0 {
			return n, nil
		}
	}
}

func (e *env) token(user string) string {
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user,
		"iat": time.Now().Unix(),
		"exp": time.Now().Add(2 * time.Hour).Unix(),
	})
	s, err := t.SignedString([]byte(e.secret))
	if err != nil {
		panic(err)
	}
	return s
}

// ---- measurements ---------------------------------------------------------

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// redisMemory is what Redis's memory is made of (INFO memory), in bytes:
// used_memory, and of it the buffers of its client connections
// (mem_clients_normal and mem_clients_slaves), which go with the
// connections a server keeps and what they are doing at the moment, not
// with what it stores. With -redis own it is all the servers under test;
// on a shared Redis it includes whatever else is stored there.
type redisMemory struct {
	used, clients int64
}

// data is the memory less the connections' buffers.
func (m redisMemory) data() int64 { return m.used - m.clients }

func (e *env) usedMemory(ctx context.Context) (redisMemory, error) {
	info, err := e.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return redisMemory{}, err
	}
	var m redisMemory
	for _, f := range []struct {
		name string
		into *int64
	}{{"used_memory", &m.used}, {"mem_clients_normal", &m.clients}, {"mem_clients_slaves", &m.clients}} {
		v := infoField(info, f.name)
		if v == "" {
			return redisMemory{}, fmt.Errorf("INFO memory has no %s", f.name)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return redisMemory{}, fmt.Errorf("INFO memory %s: %w", f.name, err)
		}
		*f.into += n
	}
	return m, nil
}

// cmdStats is INFO commandstats: calls per command.
type cmdStats map[string]int64

func (e *env) commandStats(ctx context.Context) (cmdStats, error) {
	return e.commandField(ctx, "calls=")
}

// commandTimes is INFO commandstats: the µs Redis spent in each command
// (its own work: not the reads and writes of its clients' connections).
func (e *env) commandTimes(ctx context.Context) (cmdStats, error) {
	return e.commandField(ctx, "usec=")
}

// commandField is one field of INFO commandstats per command.
func (e *env) commandField(ctx context.Context, field string) (cmdStats, error) {
	info, err := e.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := cmdStats{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, field); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out, nil
}

// readsProcessed is INFO stats' total_reads_processed: the reads Redis
// made from its clients' connections. A client that sends each operation
// on its own costs Redis a read (a wake of its event loop, a syscall, a
// parse) per operation; one that pipelines many operations in one write
// costs one read for all of them. Redis's CPU follows these reads more
// than its commands. -1 if unknown.
func (e *env) readsProcessed(ctx context.Context) int64 {
	info, err := e.rdb.Info(ctx, "stats").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// sub returns s − before.
func (s cmdStats) sub(before cmdStats) cmdStats {
	out := cmdStats{}
	for k, v := range s {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (s cmdStats) total() int64 {
	var t int64
	for _, v := range s {
		t += v
	}
	return t
}

// measurement commands of this tool, left out of the totals
var ownCommands = map[string]bool{"info": true, "ping": true, "hello": true, "client|setinfo": true}

func (s cmdStats) withoutOwn() cmdStats {
	out := cmdStats{}
	for k, v := range s {
		if !ownCommands[k] {
			out[k] = v
		}
	}
	return out
}

const clkTck = 100 // USER_HZ on Linux

// cpuTime is a process's user+system CPU time.
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+2:])
	// fields after the command: state(3) ... utime(14) stime(15)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / clkTck
}

// machineCPU is the machine's busy and total CPU time (all cores) from
// /proc/stat.
func machineCPU() (busy, total time.Duration) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text())[1:]
	var sum, idle int64
	for i, x := range fields {
		v, _ := strconv.ParseInt(x, 10, 64)
		if i >= 8 { // guest, guest_nice are included in user, nice
			break
		}
		sum += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return time.Duration(sum-idle) * time.Second / clkTck, time.Duration(sum) * time.Second / clkTck
}

// rssKB is VmRSS of a process in KiB.
func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// scrape reads a few series from a node's /metrics: name{labels} → value
// for the names asked (a prefix match on the series line).
func scrape(addr string, names ...string) map[string]float64 {
	out := map[string]float64{}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(line, n) {
				i := strings.LastIndexByte(line, ' ')
				if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
					out[line[:i]] = v
				}
			}
		}
	}
	return out
}

// logProblems returns the WARN/ERROR lines of a node's log (at most max,
// and the total count).
func logProblems(path string, max int) ([]string, int) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	var lines []string
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "panic") {
			n++
			if len(lines) < max {
				if len(l) > 400 {
					l = l[:400] + "…"
				}
				lines = append(lines, l)
			}
		}
	}
	return lines, n
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// raiseNoFile lifts RLIMIT_NOFILE to the hard limit.
func raiseNoFile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return 0, err
		}
	}
	return r.Cur, nil
}

// redisClients is how many client connections Redis has (INFO clients),
// this tool's own among them; -1 if unknown.
func (e *env) redisClients(ctx context.Context) int {
	info, err := e.rdb.Info(ctx, "clients").Result()
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(infoField(info, "connected_clients"))
	if err != nil {
		return -1
	}
	return n
}
