// Command lastseen-bench counts the database write statements that
// last-seen tracking costs under a simulated load, written through (one
// UPDATE per heartbeat) and through the lastseen pipeline (coarsen →
// buffer → batched flush), and prints the reduction.
//
//	go run ./cmd/lastseen-bench [-users 10000] [-heartbeat 25s] [-duration 30m] [-compress 0]
//
// Time is simulated: a fake clock advances in one-second steps, heartbeats
// are spread evenly over each interval, and the pipeline is flushed every
// flush interval of simulated time, exactly as Pipeline.Run would. With
// -compress N the simulation is paced at N times real time; 0 runs it as fast
// as possible.
//
// The pipeline writes to a real PostgreSQL (store.OpenPostgres on a fresh
// database, dropped at the end) and its statements are counted by the store
// itself. The write-through count is exact by construction (users ×
// heartbeats); to show what it costs, a sample of those UPDATEs is executed
// against PostgreSQL in a fresh database and the time for all of them is
// extrapolated, which the output says. Without PostgreSQL the pipeline
// writes to the embedded SQLite store and the write-through side is only
// counted.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/store"
)

const defaultDatabase = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

type options struct {
	users         int
	heartbeat     time.Duration
	duration      time.Duration
	compress      float64
	coarse        time.Duration
	flushInterval time.Duration
	flushBatch    int
	churn         float64
	ramp          time.Duration
	sample        int
	conns         int
	databaseURL   string
	buffer        string
	redisURL      string
	target        float64
	seed          uint64
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lastseen-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("lastseen-bench", flag.ContinueOnError)
	fs.IntVar(&o.users, "users", 10_000, "simulated users, each with one connection")
	fs.DurationVar(&o.heartbeat, "heartbeat", 25*time.Second, "heartbeat interval of every user")
	fs.DurationVar(&o.duration, "duration", 30*time.Minute, "simulated duration")
	fs.Float64Var(&o.compress, "compress", 0, "time compression: simulate N times faster than real time (0: as fast as possible)")
	fs.DurationVar(&o.coarse, "coarse", 10*time.Minute, "PRESENCE_LASTSEEN_COARSE")
	fs.DurationVar(&o.flushInterval, "flush-interval", 30*time.Second, "PRESENCE_LASTSEEN_FLUSH_INTERVAL")
	fs.IntVar(&o.flushBatch, "flush-batch", 1000, "PRESENCE_LASTSEEN_FLUSH_BATCH")
	fs.Float64Var(&o.churn, "churn", 0, "fraction of users who disconnect once mid-run and come back a minute later")
	fs.DurationVar(&o.ramp, "ramp", 0, "users connect at random times within this window (0: all within the first heartbeat interval)")
	fs.IntVar(&o.sample, "sample", 30_000, "write-through UPDATEs actually executed against PostgreSQL (the rest is extrapolated; 0: count only)")
	fs.IntVar(&o.conns, "conns", 8, "connections executing the write-through sample")
	fs.StringVar(&o.databaseURL, "database-url", envOr("DATABASE_TEST_URL", defaultDatabase), "PostgreSQL server where fresh databases are created and dropped")
	fs.StringVar(&o.buffer, "buffer", "memory", "pipeline buffer: memory or redis")
	fs.StringVar(&o.redisURL, "redis-url", envOr("REDIS_TEST_URL", "redis://127.0.0.1:6379"), "Redis for -buffer redis (keys under a fresh prefix, deleted at the end)")
	fs.Float64Var(&o.target, "target", 99.9, "required reduction in percent; below it the command fails")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of heartbeat phases and churn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.users <= 0 || o.heartbeat <= 0 || o.duration <= 0 || o.flushInterval <= 0 {
		return errors.New("-users, -heartbeat, -duration and -flush-interval must be positive")
	}
	if o.churn > 0 && o.duration <= 3*time.Minute {
		return errors.New("-churn needs a -duration over 3m")
	}
	if o.buffer != "memory" && o.buffer != "redis" {
		return fmt.Errorf("-buffer %q: want memory or redis", o.buffer)
	}
	return bench(ctx, o, out)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// ---- the load ----

type event struct {
	user    int
	at      time.Time
	offline bool // the user's last connection closed (exact last-seen)
}

// load generates the simulated events in time order, one simulated second
// at a time, calling step after each second.
type load struct {
	o       options
	start   time.Time
	ids     []string
	next    []time.Time // next heartbeat of each user
	downAt  []time.Time // churn: when the user disconnects (zero: never)
	upAt    []time.Time // churn: when they reconnect
	wentOff []bool
}

func newLoad(o options, start time.Time) *load {
	r := mrand.New(mrand.NewPCG(o.seed, 42))
	l := &load{o: o, start: start, ids: make([]string, o.users), next: make([]time.Time, o.users),
		downAt: make([]time.Time, o.users), upAt: make([]time.Time, o.users), wentOff: make([]bool, o.users)}
	for i := range l.ids {
		l.ids[i] = fmt.Sprintf("user%06d", i)
		// first heartbeats (connections) spread evenly over the first
		// interval, or the ramp, at ms precision
		spread := max(o.heartbeat, o.ramp).Milliseconds()
		l.next[i] = start.Add(time.Duration(r.Int64N(spread)) * time.Millisecond)
		if r.Float64() < o.churn {
			l.downAt[i] = start.Add(time.Duration(r.Int64N(int64(o.duration - 2*time.Minute))))
			l.upAt[i] = l.downAt[i].Add(time.Minute)
		}
	}
	return l
}

// run emits the events of [start, start+duration) in one-second steps.
func (l *load) run(emit func(event), step func(now time.Time) error) error {
	end := l.start.Add(l.o.duration)
	for t := l.start; t.Before(end); {
		stepEnd := t.Add(time.Second)
		if stepEnd.After(end) {
			stepEnd = end
		}
		for i := range l.next {
			if d := l.downAt[i]; !d.IsZero() && !l.wentOff[i] && d.Before(stepEnd) {
				l.wentOff[i] = true
				emit(event{user: i, at: d, offline: true})
			}
			for l.next[i].Before(stepEnd) {
				at := l.next[i]
				l.next[i] = at.Add(l.o.heartbeat)
				if !l.downAt[i].IsZero() && !at.Before(l.downAt[i]) && at.Before(l.upAt[i]) {
					continue // disconnected: no heartbeat
				}
				emit(event{user: i, at: at})
			}
		}
		if err := step(stepEnd); err != nil {
			return err
		}
		t = stepEnd
	}
	return nil
}

// ---- the benchmark ----

func bench(ctx context.Context, o options, out io.Writer) error {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	end := start.Add(o.duration)

	// Count the write-through statements: one per heartbeat, one per
	// disconnect.
	var wtHeartbeats, wtOffline int64
	if err := newLoad(o, start).run(func(e event) {
		if e.offline {
			wtOffline++
		} else {
			wtHeartbeats++
		}
	}, func(time.Time) error { return nil }); err != nil {
		return err
	}

	pg, pgErr := newPGServer(ctx, o.databaseURL)
	if pg != nil {
		defer pg.close()
	}

	fmt.Fprintf(out, "presenced last-seen write benchmark\n")
	fmt.Fprintf(out, "load: %d users, one heartbeat every %s each, %s simulated", o.users, o.heartbeat, o.duration)
	if o.ramp > o.heartbeat {
		fmt.Fprintf(out, ", connecting at random within the first %s", o.ramp)
	}
	if o.churn > 0 {
		fmt.Fprintf(out, ", %g%% of users disconnect once for a minute", o.churn*100)
	}
	fmt.Fprintf(out, ", then everyone disconnects\n")
	fmt.Fprintf(out, "pipeline settings: coarse %s, flush every %s in batches of %d, %s buffer\n\n", o.coarse, o.flushInterval, o.flushBatch, o.buffer)

	// ---- write-through ----
	fmt.Fprintf(out, "write-through (one UPDATE per heartbeat and per disconnect):\n")
	fmt.Fprintf(out, "  statements: %d during the load (= %d heartbeats + %d disconnects, exact count), %d more at the final disconnects\n",
		wtHeartbeats+wtOffline, wtHeartbeats, wtOffline, o.users)
	switch {
	case pg == nil:
		fmt.Fprintf(out, "  not executed: PostgreSQL unreachable (%v)\n", pgErr)
	case o.sample <= 0:
		fmt.Fprintf(out, "  not executed (-sample 0)\n")
	default:
		if err := writeThroughSample(ctx, o, pg, start, wtHeartbeats+wtOffline, out); err != nil {
			return fmt.Errorf("write-through sample: %w", err)
		}
	}

	// ---- pipeline ----
	st, where, closeStore, err := openStore(ctx, o, pg, pgErr)
	if err != nil {
		return err
	}
	defer closeStore()
	buf, closeBuf, err := openBuffer(ctx, o)
	if err != nil {
		return err
	}
	defer closeBuf()

	clk := fakeclock.New(start)
	p := lastseen.NewPipeline(buf, st, lastseen.Config{
		Coarse: o.coarse, FlushInterval: o.flushInterval, FlushBatch: o.flushBatch, Now: clk.Now,
		DirectActivity: o.buffer == "redis", // as presenced sets it
	})
	l := newLoad(o, start)
	realStart := time.Now()
	nextFlush := start.Add(o.flushInterval)
	var emitErr error
	err = l.run(func(e event) {
		if emitErr != nil {
			return
		}
		if e.offline {
			emitErr = p.RecordExact(ctx, l.ids[e.user], e.at)
		} else {
			emitErr = p.Record(ctx, l.ids[e.user], e.at)
		}
	}, func(now time.Time) error {
		if emitErr != nil {
			return emitErr
		}
		clk.Set(now)
		if !now.Before(nextFlush) {
			nextFlush = nextFlush.Add(o.flushInterval)
			if err := p.Flush(ctx); err != nil {
				return err
			}
		}
		if o.compress > 0 {
			wait := time.Duration(float64(now.Sub(start))/o.compress) - time.Since(realStart)
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("pipeline run: %w", err)
	}
	if err := p.Flush(ctx); err != nil { // the final flush of a graceful shutdown
		return err
	}
	elapsed := time.Since(realStart)
	during := p.Stats()
	storeDuring := st.Stats()

	// Everyone disconnects: exact times, then a flush.
	offline := make([]time.Time, o.users)
	for i, id := range l.ids {
		offline[i] = end.Add(time.Duration(i%5000) * time.Millisecond)
		if err := p.RecordExact(ctx, id, offline[i]); err != nil {
			return err
		}
	}
	clk.Set(end.Add(5 * time.Second))
	if err := p.Flush(ctx); err != nil {
		return err
	}
	total := p.Stats()
	storeTotal := st.Stats()

	compress := "none, as fast as possible"
	if o.compress > 0 {
		compress = fmt.Sprintf("%gx", o.compress)
	}
	fmt.Fprintf(out, "\npipeline (coarsen → %s buffer → one UPSERT per batch, %s):\n", o.buffer, where)
	fmt.Fprintf(out, "  simulated %s in %s (time compression: %s)\n", o.duration, elapsed.Round(time.Millisecond), compress)
	fmt.Fprintf(out, "  statements: %d during the load (%d rows), %d more at the final disconnects (%d rows)\n",
		during.Statements, during.Rows, total.Statements-during.Statements, total.Rows-during.Rows)
	fmt.Fprintf(out, "  counted by the store itself: %d write statements during the load, %d in all\n", storeDuring.Statements, storeTotal.Statements)

	// Correctness: the store holds every user's exact offline time.
	ok, err := verify(ctx, st, l.ids, offline)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  store after the final disconnects: %d/%d users hold exactly their offline time\n", ok, o.users)

	wt := float64(wtHeartbeats + wtOffline)
	red := 100 * (1 - float64(storeDuring.Statements)/wt)
	redAll := 100 * (1 - float64(storeTotal.Statements)/(wt+float64(o.users)))
	verdict := "PASS"
	if red < o.target || ok != o.users {
		verdict = "FAIL"
	}
	fmt.Fprintf(out, "\nreduction during the load: %d → %d statements = %.4f%% (target ≥ %g%%) %s\n",
		int64(wt), storeDuring.Statements, red, o.target, verdict)
	fmt.Fprintf(out, "including the final disconnects: %d → %d statements = %.4f%%\n",
		int64(wt)+int64(o.users), storeTotal.Statements, redAll)
	if verdict == "FAIL" {
		return errors.New("target not met")
	}
	return nil
}

func verify(ctx context.Context, st store.Store, ids []string, want []time.Time) (int, error) {
	ok := 0
	for from := 0; from < len(ids); from += store.MaxIDs {
		to := min(from+store.MaxIDs, len(ids))
		got, err := st.LastSeen(ctx, ids[from:to])
		if err != nil {
			return 0, fmt.Errorf("verify: %w", err)
		}
		for i := from; i < to; i++ {
			if got[ids[i]].Equal(want[i]) {
				ok++
			}
		}
	}
	return ok, nil
}

// ---- stores and buffers ----

type statsStore interface {
	store.Store
	Stats() store.Stats
}

func openStore(ctx context.Context, o options, pg *pgServer, pgErr error) (statsStore, string, func(), error) {
	if pg != nil {
		u, name, err := pg.create(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		s, err := store.OpenPostgres(ctx, u, store.PostgresConfig{})
		if err != nil {
			return nil, "", nil, err
		}
		return s, "PostgreSQL, store.OpenPostgres, fresh database " + name, func() { s.Close() }, nil
	}
	dir, err := os.MkdirTemp("", "lastseen-bench-")
	if err != nil {
		return nil, "", nil, err
	}
	s, err := store.OpenSQLite(ctx, filepath.Join(dir, "bench.db"), store.SQLiteConfig{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	return s, fmt.Sprintf("embedded SQLite store (PostgreSQL unreachable: %v)", pgErr), func() { s.Close(); os.RemoveAll(dir) }, nil
}

func openBuffer(ctx context.Context, o options) (lastseen.Buffer, func(), error) {
	if o.buffer == "memory" {
		return lastseen.NewMemory(), func() {}, nil
	}
	opts, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis-url: %w", err)
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("redis: %w", err)
	}
	b := lastseen.NewRedis(c, lastseen.RedisConfig{Prefix: "lastseen-bench:" + randHex(4)})
	return b, func() {
		t, d, cl := b.Keys()
		c.Del(context.Background(), t, d, cl)
		c.Close()
	}, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- PostgreSQL ----

// pgServer creates fresh databases on a server and drops them at close.
type pgServer struct {
	admin string
	mu    sync.Mutex
	dbs   []string
}

func newPGServer(ctx context.Context, admin string) (*pgServer, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, admin)
	if err != nil {
		return nil, err
	}
	defer conn.Close(cctx)
	if err := conn.Ping(cctx); err != nil {
		return nil, err
	}
	return &pgServer{admin: admin}, nil
}

func (s *pgServer) create(ctx context.Context) (u, name string, err error) {
	name = "presenced_bench_" + randHex(6)
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", err
	}
	s.mu.Lock()
	s.dbs = append(s.dbs, name)
	s.mu.Unlock()
	if strings.HasPrefix(s.admin, "postgres://") || strings.HasPrefix(s.admin, "postgresql://") {
		pu, err := url.Parse(s.admin)
		if err != nil {
			return "", "", err
		}
		pu.Path, pu.RawPath = "/"+name, ""
		return pu.String(), name, nil
	}
	return s.admin + " dbname=" + name, name, nil
}

func (s *pgServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lastseen-bench: drop databases:", err)
		return
	}
	defer conn.Close(ctx)
	for _, name := range s.dbs {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "lastseen-bench: drop", name+":", err)
		}
	}
}

// writeThroughSample executes the first o.sample write-through UPDATEs of
// the load, in time order, on o.conns connections, against a fresh
// database with the store's schema, and extrapolates the time of all n.
func writeThroughSample(ctx context.Context, o options, pg *pgServer, start time.Time, n int64, out io.Writer) error {
	u, name, err := pg.create(ctx)
	if err != nil {
		return err
	}
	s, err := store.OpenPostgres(ctx, u, store.PostgresConfig{}) // applies the schema
	if err != nil {
		return err
	}
	s.Close()
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(o.conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Every user has a row (not counted: the load starts from there).
	if _, err := pool.Exec(ctx, `INSERT INTO last_seen (user_id, seen_at)
		SELECT 'user' || lpad(g::text, 6, '0'), $1 FROM generate_series(0, $2 - 1) g`, start.UnixMilli(), o.users); err != nil {
		return err
	}

	sample := min(int64(o.sample), n)
	jobs := make(chan event, 1024)
	l := newLoad(o, start)
	go func() {
		defer close(jobs)
		var sent int64
		stop := errors.New("stop")
		_ = l.run(func(e event) {
			if sent < sample {
				jobs <- e
				sent++
			}
		}, func(time.Time) error {
			if sent >= sample || ctx.Err() != nil {
				return stop
			}
			return nil
		})
	}()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		failed   atomic.Bool
		executed int64
	)
	t0 := time.Now()
	for range o.conns {
		wg.Go(func() {
			var done int64
			for e := range jobs {
				if failed.Load() {
					continue
				}
				_, err := pool.Exec(ctx, `UPDATE last_seen SET seen_at = $2 WHERE user_id = $1`, l.ids[e.user], e.at.UnixMilli())
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					failed.Store(true)
					continue
				}
				done++
			}
			mu.Lock()
			executed += done
			mu.Unlock()
		})
	}
	wg.Wait()
	took := time.Since(t0)
	if firstErr != nil {
		return firstErr
	}
	rate := float64(executed) / took.Seconds()
	if executed >= n {
		fmt.Fprintf(out, "  executed all %d against PostgreSQL (fresh database %s, %d connections) in %s: %.0f statements/s\n",
			executed, name, o.conns, took.Round(time.Millisecond), rate)
		return nil
	}
	all := time.Duration(float64(n) / rate * float64(time.Second))
	fmt.Fprintf(out, "  executed a sample of %d (the first in time order) against PostgreSQL (fresh database %s, %d connections) in %s: %.0f statements/s\n",
		executed, name, o.conns, took.Round(time.Millisecond), rate)
	fmt.Fprintf(out, "  extrapolated, not measured: all %d would keep the database busy for ≈ %s (%.1f%% of the simulated %s)\n",
		n, all.Round(time.Second), 100*all.Seconds()/o.duration.Seconds(), o.duration)
	return nil
}
