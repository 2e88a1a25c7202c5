package presence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/internal/throttle"
	"github.com/presenced/presenced/timestamp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// RedisConfig configures the Redis backend. Zero values mean the defaults.
type RedisConfig struct {
	Prefix string // key prefix, default "presence"
	// ReconcileEvery is how often a node compares its entries in Redis with
	// its sockets and removes those of sockets it no longer has (default
	// TTL/2: such a ghost lives less than TTL); LeaseEvery how often it
	// renews its lease (default 1s, at most a third of the lease).
	ReconcileEvery time.Duration
	LeaseEvery     time.Duration
	Log            *slog.Logger
}

// ErrNodeIDTaken: another live instance holds this node's id.
var ErrNodeIDTaken = errors.New("presence: the node id is held by another live node")

// errLeaseWait: the lease cannot be claimed yet (the id's previous holder
// has not lapsed yet, or this instance is being reaped); try again later.
var errLeaseWait = errors.New("presence: waiting to claim the node lease")

// timerClaim is how long a node that claimed due timers has to fire and
// acknowledge them before they are due again (for another node, if it died).
const timerClaim = 5 * time.Second

// reapClaim is how long a reaper holds a dead instance before another node
// may take the reap over; the reaper extends it as it goes.
const reapClaim = 15 * time.Second

// RedisEngine is one node's Engine over Redis (cluster mode).
//
// Liveness is a lease per node id, held by one process (a random instance
// token) and kept on Redis's clock: nodes' clocks are never compared. A
// live node's entries live as long as its lease; a node whose lease lapsed
// is reaped by the others, and only by a node whose own lease has been
// renewed without a gap for a full lease period.
type RedisEngine struct {
	rdb  redis.UniversalClient
	cfg  Config
	rcfg RedisConfig
	log  *slog.Logger

	kUsers, kDue, kClaimed, kLease, kHolder, kReap, kNode string
	kTentative                                            string // this node id's tentative claim (nodeLease)
	kEpoch                                                string // {g}'s epoch (redisepoch)

	token     string           // this process's instance token
	minLevel  atomic.Int32     // the lowest readerLevel of the live instances, at the last lease renewal
	fakeClock func() time.Time // tests: Redis's clock replaced (export_test.go)

	lastFailedTick time.Time    // Tick's alone: the last that failed (lossSettle)
	redisSkew      atomic.Int64 // ms: Redis's clock less this machine's, at the last lease renewal (redisNow)
	claimsAt       atomic.Int64 // ms, redisNow: when anyDue looks for claims that ran out next
	duePoll        duePoll      // when anyDue reads the due set next

	leaseMu    sync.Mutex  // one lease call at a time; guards the fields below
	held       atomic.Bool // this instance holds the node id (or held it, until it found the id taken)
	retired    atomic.Bool // Retire: the node shuts down; its ticks only renew its lease
	lastLse    time.Time   // node clock: the last lease renewal (schedule only)
	takenUntil int64       // while starting: the live holder's expiry first seen
	tentative  time.Time   // node clock: until when this instance's claim is tentative (nodeLease)
	resyncDue  bool        // entries to register again (after a reap or a data loss)
	gEpoch     string      // {g}'s epoch (redisepoch) as last read: a resync that reads another knows {g}'s keys were lost
	epochDue   bool        // a resync ran: readGEpoch to tell a loss of {g} from a reap
	reaped     prometheus.Counter

	mu      sync.Mutex
	local   map[string]*rSocket  // this node's sockets
	lastAct map[string]time.Time // user → when this node next sends the user's activity
	pending map[string]*rSocket  // disconnected sockets whose cleanup failed; retried by Tick
	leaving map[string]struct{}  // disconnected sockets whose removal is under way
	// leavingConv holds the conversations whose Leave is under way, by
	// socket: a typing start of the socket there is refused, or taken back
	// if it was under way too (joinedSocket)
	leavingConv map[sidConv]struct{}
	lastRec     time.Time           // the last reconciliation
	missing     map[string]struct{} // live sockets the last reconciliation found missing from Redis (registerMissing)
	// owed are leaves a lost removal held back for the user's sockets on
	// other nodes (removeFrom's lost), by conversation and user: checked
	// again once those nodes' reconciliations had time to bring the
	// member record back (runOwed)
	owed map[owedKey]owedLeave
	// graces are the flap graces this node started whose end no lease
	// renewal has shown {g} intact past yet, in the order they end;
	// orphans those a resync handed to runGraces (redis_graces.go)
	graces, orphans []graceNote
	// memberChecks: how many reconciliations to come read the member
	// records of this node's sockets (unlisted): two after Redis failed
	// (a command or a tick), and two of every memberCheckEvery
	memberChecks atomic.Int32
	reconciles   int // reconciliations done (Tick's)
	regBuckets   int // the registry's buckets (redis_registry.go); regMu serialises their growth
	regMu        sync.Mutex

	act   activityBatcher // group commit of activity records (redis_activity.go)
	pipes pipes           // every pipeline goes through it (redis_batch.go)
	alarm *alarm          // wakes Run when a flap grace of this node ends
	// typingAlarm wakes Run when a typing entry this node wrote expires
	// (typingTimers), so that each stop goes out near its moment.
	typingAlarm *alarm
	away        *awayWatch   // the users this node checks for away (redis_away.go)
	typing      typingTimers // the typing expiries this node fires (redis_typing.go)
	// crossSlot: rdb is one Redis server, not a cluster, so a script may
	// read keys of several slots (queueStatuses).
	crossSlot bool
}

type rSocket struct {
	id, user string
	convs    map[string]struct{}
	bucket   int // its registry bucket (redis_registry.go)
	// mode is how its removal ends its presence (removeFrom: "grace" or
	// "now") and gone the moment of its disconnect (Redis's clock, ms),
	// set by Disconnect: a retry of a removal that failed keeps both.
	mode string
	gone int64
	// failed: a removal of it failed (Redis unreachable, or its reply
	// lost) and is retried, or one of another socket of the user's here
	// held an announcement back for it (owe): its removal that finds no
	// record of the user announces what nobody did (removeFrom's lost).
	// Written under mu.
	failed bool
	// act is the moment (Redis's clock, ms; 0: none) of the user's last
	// activity this node saw, when the socket was the user's last here:
	// the removal records it (it may not have been recorded yet, see
	// activityEvery), for the user's sockets on other nodes.
	act int64
	// unsure are conversations whose join failed with its outcome unknown
	// and could not be undone (undoJoin): kept in convs for the removal
	// to clean, never joined again by register (the client was told the
	// join failed). Written under mu.
	unsure map[string]struct{}
}

var _ Engine = (*RedisEngine)(nil)

// NewRedisEngine attaches a node to Redis.
func NewRedisEngine(rdb redis.UniversalClient, cfg Config, rcfg RedisConfig) *RedisEngine {
	cfg = cfg.WithDefaults()
	if rcfg.Prefix == "" {
		rcfg.Prefix = "presence"
	}
	if rcfg.ReconcileEvery <= 0 {
		rcfg.ReconcileEvery = cfg.TTL / 2
	}
	if rcfg.LeaseEvery <= 0 {
		rcfg.LeaseEvery = min(time.Second, cfg.LeaseTTL/3)
	}
	if rcfg.Log == nil {
		rcfg.Log = slog.New(slog.DiscardHandler)
	}
	rcfg.LeaseEvery = min(rcfg.LeaseEvery, cfg.LeaseTTL/3)
	p := rcfg.Prefix
	e := &RedisEngine{
		rdb: rdb, cfg: cfg, rcfg: rcfg, log: rcfg.Log,
		kUsers: p + ":{g}:users", kDue: p + ":{g}:due", kClaimed: p + ":{g}:claimed", kLease: p + ":{g}:lease", kHolder: p + ":{g}:holder", kReap: p + ":{g}:reap",
		kTentative: p + ":{g}:tentative:" + cfg.NodeID, kEpoch: p + ":{g}:epoch",
		token: randomToken(),
		local: map[string]*rSocket{}, pending: map[string]*rSocket{}, lastAct: map[string]time.Time{}, owed: map[owedKey]owedLeave{},
		leaving: map[string]struct{}{}, leavingConv: map[sidConv]struct{}{},
		regBuckets:  regMinBuckets,
		alarm:       newAlarm(alarmStep, alarmGap),
		typingAlarm: newAlarm(typingAlarmStep, typingAlarmGap),
		away:        newAwayWatch(),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_nodes_reaped_total",
			Help: "Dead node instances (lease lapsed) whose presence entries this node removed.",
		}),
	}
	_, e.crossSlot = rdb.(*redis.Client) // a standalone or Sentinel client; not a ClusterClient or Ring
	e.act.idle.L = &e.act.mu
	e.kNode = e.registryKey(cfg.NodeID, e.token)
	e.pipes.rdb = rdb
	return e
}

// readerLevel is what this release reads of the records other releases
// write, carried in its instance token ("L<level>-<16 hex digits>"; a
// token of 16 hex digits alone is of a release before 2026-12-05, level
// 0). 1: the short member record (memberLib). A record form is written
// only once every live instance reads it (nodeLease answers the lowest
// level among the holders), so that a rolling upgrade never leaves a
// node of the earlier release with records it cannot read.
const readerLevel = 1

// randomToken names this process among the instances of its node id.
func randomToken() string { return fmt.Sprintf("L%d-%016x", readerLevel, rand.Uint64()) }

// shortMembers is the member record form argument of convJoin and
// convLeave: "1" once every live instance reads the short form.
func (e *RedisEngine) shortMembers() string {
	if e.minLevel.Load() >= 1 {
		return "1"
	}
	return "0"
}

// registryKey is the key of a node instance's socket registry.
func (e *RedisEngine) registryKey(node, token string) string {
	return e.rcfg.Prefix + ":{n:" + node + "}:" + token + ":socks"
}

// Collectors are the engine's metrics, for the owner's registry.
func (e *RedisEngine) Collectors() []prometheus.Collector { return []prometheus.Collector{e.reaped} }

// clk is the clock argument of the scripts: "" (Redis's own clock), or in
// tests the fake clock's time.
func (e *RedisEngine) clk() string {
	if e.fakeClock != nil {
		return strconv.FormatInt(timestamp.Millis(e.fakeClock()), 10)
	}
	return ""
}

// redisNow is Redis's clock in ms as this node estimates it, for commands
// that write a time without a script (TIME and a write that uses it are
// one step only in a script): this machine's clock plus the skew measured
// at the last lease renewal (noteRedisClock), which is off by at most half
// that renewal's round trip plus the drift since, against a typing TTL of
// seconds. In tests, the fake clock.
func (e *RedisEngine) redisNow() int64 {
	if e.fakeClock != nil {
		return timestamp.Millis(e.fakeClock())
	}
	return time.Now().UnixMilli() + e.redisSkew.Load()
}

// noteRedisClock records the skew of Redis's clock, read as redisMs by a
// call sent at t0 whose reply came at t1.
func (e *RedisEngine) noteRedisClock(redisMs int64, t0, t1 time.Time) {
	mid := t0.Add(t1.Sub(t0) / 2)
	e.redisSkew.Store(redisMs - mid.UnixMilli())
}

// convKeys are a conversation's keys: on sk su m ty tyo. on, sk and su
// hold what releases before 2026-12-02 wrote: the scripts still read su
// for their member records, and clear all three as those entries go.
type convKeys struct{ on, sk, su, m, ty, tyo string }

func (e *RedisEngine) conv(id string) convKeys {
	b := e.rcfg.Prefix + ":{c:" + id + "}:"
	return convKeys{b + "on", b + "sk", b + "su", b + "m", b + "ty", b + "tyo"}
}

// userSockets is the key of a user's socket set (slot {g}, with the user
// records), where a release before 2026-12-02 kept it; the record holds
// it now (see userLib).
func (e *RedisEngine) userSockets(user string) string { return e.rcfg.Prefix + ":{g}:usk:" + user }

func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("presence: redis %s: %w", op, errors.Join(ErrUnavailable, err))
}

// scripts are every Lua script of the engine, loaded after a NOSCRIPT.
var scripts = []*redis.Script{convJoin, convTyping, convLeave, convGrace,
	typingExpire, typingTakeBack, userConnect, userDisconnect, userGrace, userActivity, userAway, dueIn, claimDue, ackDue, rosterStatus,
	nodeLease, nodeRelease, claimDead, reapHeld}

// exec runs a pipeline. Scripts in pipelines go as EVALSHA, which fails
// with NOSCRIPT when Redis lost its script cache (a restart, a failover):
// then the scripts are loaded and the same commands sent again.
func (e *RedisEngine) exec(ctx context.Context, pipe redis.Pipeliner) error {
	cmds := pipe.Cmds()
	err := e.pipes.exec(ctx, cmds)
	if err == nil || abandoned(err) {
		return err
	}
	if failedCmd(cmds) != nil { // not a field or key that is not there (redis.Nil)
		e.redisFailed()
	}
	if !noScript(cmds) {
		return err
	}
	for _, sc := range scripts {
		if err := sc.Load(ctx, e.rdb).Err(); err != nil {
			return err
		}
	}
	again := e.rdb.Pipeline()
	for _, c := range cmds {
		_ = again.Process(ctx, c)
	}
	_, err = again.Exec(ctx)
	return err
}

func noScript(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

func (e *RedisEngine) emit(ctx context.Context, b batch) {
	if len(b) > 0 {
		e.cfg.Sink(ctx, b)
	}
}

// lossSettle is how long after a tick that failed (Redis unreachable)
// the announcements of what the outage hid wait: the retried removals of
// sockets whose disconnect failed meanwhile, and the ends of graces whose
// timers Redis lost. Pub/Sub delivers to the subscribed alone, and the
// other nodes subscribe again within a second of Redis's return (every
// 100–500 ms): until 2026-12-07 those leaves went out within 0.1 s of
// it, to no other node, and their rooms kept the users for good (a
// black-box audit: 4 of 6 users who disconnected in the 3 s before a
// Redis restart without persistence, or during it).
const lossSettle = 2 * time.Second

// Tick implements Engine.
func (e *RedisEngine) Tick(ctx context.Context) error {
	now := e.cfg.Now()
	var errs []error
	if e.leaseDue(now) {
		renewed, err := e.lease(ctx, now, false)
		switch {
		case errors.Is(err, ErrNodeIDTaken):
			return err
		case errors.Is(err, errLeaseWait):
		case err != nil:
			errs = append(errs, err)
		case renewed && !e.retired.Load():
			if err := e.reapDead(ctx, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.retired.Load() {
		return errors.Join(errs...)
	}
	if e.held.Load() && now.Sub(e.lastRec) >= e.rcfg.ReconcileEvery {
		if e.reconciles%memberCheckEvery == 0 {
			e.memberChecks.Store(max(e.memberChecks.Load(), 2))
		}
		check := e.memberChecks.Load() > 0
		if err := e.reconcile(ctx, now, check); err != nil {
			errs = append(errs, err)
		} else {
			e.lastRec = now
			e.reconciles++
			if check {
				e.memberChecks.Add(-1)
			}
		}
	}
	settled := now.Sub(e.lastFailedTick) >= lossSettle
	if !settled {
		// (not yet: see lossSettle)
	} else if err := e.retryPending(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if err := e.runDue(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if err := e.runTyping(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if err := e.runAway(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if err := e.runOwed(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if !settled {
		// (not yet: see lossSettle)
	} else if err := e.runGraces(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		e.redisFailed()
		e.lastFailedTick = now
	}
	return errors.Join(errs...)
}

// Run implements Engine. It ends early, with ErrNodeIDTaken, if another
// live instance holds this node's id.
func (e *RedisEngine) Run(ctx context.Context) error {
	var fatal error
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer e.alarm.stop()
	defer e.typingAlarm.stop()
	// report logs a run's failure (every 50 ms while Redis is down: one
	// line per outageLogEvery, counted) and, recoverQuiet after the last,
	// its end
	report := func(ctx context.Context, l *throttle.Log, err error, what, count string) {
		switch {
		case err != nil && ctx.Err() == nil:
			if n, ok := l.Fail(time.Now()); ok {
				e.log.Warn(what+" failed", "err", err, count, n)
			}
		case err == nil:
			if n, ok := l.RecoverQuiet(time.Now(), recoverQuiet); ok {
				e.log.Info(what+" recovered", count, n)
			}
		}
	}
	failing := throttle.Log{Every: outageLogEvery}
	timersFailing := throttle.Log{Every: outageLogEvery}
	tick := func(ctx context.Context) error {
		err := e.Tick(ctx)
		if errors.Is(err, ErrNodeIDTaken) {
			fatal = err
			cancel()
			return nil
		}
		report(ctx, &failing, err, "presence tick", "failed_ticks")
		return nil
	}
	// A wake only runs the timers it is for: the ends of this node's
	// graces (alarm), the expiries of its typing entries (typingAlarm).
	// The lease and the rest keep to the tick.
	timers := func(run func(context.Context, time.Time) error) func(context.Context) error {
		return func(ctx context.Context) error {
			if e.retired.Load() {
				return nil
			}
			report(ctx, &timersFailing, run(ctx, e.cfg.Now()), "presence timers", "failed_runs")
			return nil
		}
	}
	_ = runTicker(tctx, e.cfg, tick, alarmWake{e.alarm.C, timers(e.runDue)}, alarmWake{e.typingAlarm.C, timers(e.runTyping)})
	return fatal
}

// Retire is called when the node begins to shut down. From then on its
// ticks only renew its lease (until Close gives the id up): the cluster's
// shared timers (the ends of flap graces, this node's own included), the
// reaping of dead nodes, away checks, typing expiries and reconciliation
// are left to the other nodes. What those announce goes out through the
// node's rooms, and a node that shuts down has closed them: a shutdown
// held up past a flap grace (a request whose body stopped arriving holds
// it up to half of PRESENCE_SHUTDOWN_TIMEOUT) fired its users' grace ends
// itself, and their presence:leave reached nobody, while their offline
// status (which goes its own way) did.
func (e *RedisEngine) Retire() { e.retired.Store(true) }

// outageLogEvery is how often a failure that repeats every tick is logged.
const outageLogEvery = 10 * time.Second

// recoverQuiet is how long the ticks (or the timers) must go without a
// failure before their recovery is logged: while a Redis Cluster master is
// down, ticks that touch it fail and others succeed, and the log flapped
// between "failed" and "recovered" every 2 s, each with a count of 1 (a
// black-box audit, 2026-12-07).
const recoverQuiet = 5 * time.Second

// Close implements Engine: the node gives its id up so that survivors do
// not reap it (its sockets were disconnected by the shutdown) and it can
// start again at once.
func (e *RedisEngine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e.mu.Lock()
	live := len(e.local) + len(e.pending)
	e.mu.Unlock()
	if live > 0 || !e.held.Load() {
		return nil // leave the lease to lapse: survivors reap what is left
	}
	if err := e.rdb.Del(ctx, regCountKey(e.kNode)).Err(); err != nil {
		return err
	}
	return nodeRelease.Run(ctx, e.rdb, []string{e.kLease, e.kHolder}, e.cfg.NodeID, e.token).Err()
}
