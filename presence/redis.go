package presence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

	token     string           // this process's instance token
	fakeClock func() time.Time // tests: Redis's clock replaced (export_test.go)

	leaseMu    sync.Mutex  // one lease call at a time; guards the fields below
	held       atomic.Bool // this instance holds (or held) the node id
	lastLse    time.Time   // node clock: the last lease renewal (schedule only)
	takenUntil int64       // while starting: the live holder's expiry first seen
	resyncDue  bool        // entries to register again (after a reap or a data loss)
	reaped     prometheus.Counter

	mu      sync.Mutex
	local   map[string]*rSocket  // this node's sockets
	lastAct map[string]time.Time // user → when this node next sends the user's activity
	pending map[string]*rSocket  // disconnected sockets whose cleanup failed; retried by Tick
	leaving map[string]struct{}  // disconnected sockets whose removal is under way
	lastRec time.Time            // the last reconciliation

	act activityBatcher // group commit of activity records (redis_activity.go)
}

type rSocket struct {
	id, user string
	convs    map[string]struct{}
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
		token: randomToken(),
		local: map[string]*rSocket{}, pending: map[string]*rSocket{}, lastAct: map[string]time.Time{},
		leaving: map[string]struct{}{},
		reaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_nodes_reaped_total",
			Help: "Dead node instances (lease lapsed) whose presence entries this node removed.",
		}),
	}
	e.kNode = e.registryKey(cfg.NodeID, e.token)
	return e
}

// randomToken names this process among the instances of its node id.
func randomToken() string { return fmt.Sprintf("%016x", rand.Uint64()) }

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
		return strconv.FormatInt(ms(e.fakeClock()), 10)
	}
	return ""
}

// convKeys are a conversation's keys: on sk su m ty tyo.
type convKeys struct{ on, sk, su, m, ty, tyo string }

func (e *RedisEngine) conv(id string) convKeys {
	b := e.rcfg.Prefix + ":{c:" + id + "}:"
	return convKeys{b + "on", b + "sk", b + "su", b + "m", b + "ty", b + "tyo"}
}

// userSockets is the key of a user's socket set (slot {g}, with the user
// records).
func (e *RedisEngine) userSockets(user string) string { return e.rcfg.Prefix + ":{g}:usk:" + user }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

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
var scripts = []*redis.Script{convJoin, convRoster, convLeave, convGrace, typingStart, typingStop,
	typingExpire, userConnect, userDisconnect, userGrace, userActivity, userAway, dueIn, claimDue, ackDue,
	nodeLease, nodeRelease, claimDead, reapHeld}

// exec runs a pipeline. Scripts in pipelines go as EVALSHA, which fails
// with NOSCRIPT when Redis lost its script cache (a restart, a failover):
// then the scripts are loaded and the same commands sent again.
func (e *RedisEngine) exec(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err == nil || !noScript(cmds) {
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

// registry is a socket's line in this node's registry.
func registry(s *rSocket) string {
	var b strings.Builder
	b.WriteString(s.user)
	for _, c := range sortedKeys(s.convs) {
		b.WriteByte('\t')
		b.WriteString(c)
	}
	return b.String()
}

// Connect implements Engine. The node's first connection claims its lease.
func (e *RedisEngine) Connect(ctx context.Context, s Socket) error {
	if !e.held.Load() {
		if _, err := e.lease(ctx, e.cfg.Now()); err != nil {
			if errors.Is(err, errLeaseWait) {
				return unavailable("connect", err)
			}
			return err
		}
	}
	e.mu.Lock()
	if _, ok := e.local[s.ID]; ok {
		e.mu.Unlock()
		return nil
	}
	rs := &rSocket{id: s.ID, user: s.UserID, convs: map[string]struct{}{}}
	e.local[s.ID] = rs
	delete(e.pending, s.ID) // a retried connect supersedes the cleanup of a failed one
	reg := registry(rs)     // under mu: a Join may already write rs.convs
	e.mu.Unlock()

	now := e.cfg.Now()
	pipe := e.rdb.Pipeline()
	pipe.HSet(ctx, e.kNode, s.ID, reg)
	came := userConnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.UserID)}, s.UserID, s.ID, e.clk(), e.cfg.AwayAfter.Milliseconds())
	if err := e.exec(ctx, pipe); err != nil {
		// The scripts may have run although the reply was lost: the
		// socket is cleaned up (idempotently) by the pending retries.
		e.mu.Lock()
		delete(e.local, s.ID)
		e.pending[s.ID] = rs
		e.mu.Unlock()
		return unavailable("connect", err)
	}
	if n, _ := came.Int(); n == 1 {
		e.emit(ctx, batch{{Kind: EventStatus, UserID: s.UserID, At: now, Status: Online}})
	}
	e.cleanIfGone(rs)
	return nil
}

// cleanIfGone queues the removal of a socket that disconnected while an
// operation of it was under way: the disconnect's removal may have run in
// Redis before that operation's writes, which would be left behind.
func (e *RedisEngine) cleanIfGone(s *rSocket) {
	e.mu.Lock()
	if _, live := e.local[s.id]; !live {
		e.pending[s.id] = s
	}
	e.mu.Unlock()
}

// Disconnect implements Engine.
func (e *RedisEngine) Disconnect(ctx context.Context, socketID string) error {
	e.mu.Lock()
	s, ok := e.local[socketID]
	if ok {
		delete(e.local, socketID)
		e.leaving[socketID] = struct{}{} // not a ghost: the reconciliation leaves it alone
	}
	e.mu.Unlock()
	if !ok {
		return nil
	}
	now := e.cfg.Now()
	b, err := e.removeSocket(ctx, s, now)
	e.emit(ctx, b)
	e.mu.Lock()
	delete(e.leaving, socketID)
	if err != nil {
		// keep it for Tick to retry: no entry is left behind for good
		e.pending[socketID] = s
	}
	e.mu.Unlock()
	return err
}

// removeSocket removes a disconnected socket of this node: its leaves and
// offline wait for the flap grace.
func (e *RedisEngine) removeSocket(ctx context.Context, s *rSocket, now time.Time) (batch, error) {
	return e.removeFrom(ctx, e.kNode, s, now, "grace", time.Time{})
}

// removeFrom removes a socket from its conversations and user, and
// schedules the grace timers, in one pipelined round trip. mode "grace" or
// "timeout" (then lastProof, if set, is the socket's last proof of life).
func (e *RedisEngine) removeFrom(ctx context.Context, regKey string, s *rSocket, now time.Time, mode string, lastProof time.Time) (batch, error) {
	at := ""
	if !lastProof.IsZero() {
		at = strconv.FormatInt(ms(lastProof), 10)
	}
	grace := e.cfg.FlapGrace.Milliseconds()
	// s.convs is written under mu by a Leave, Join or undoJoin of the same
	// socket that may still be running.
	e.mu.Lock()
	convs := sortedKeys(s.convs)
	e.mu.Unlock()
	pipe := e.rdb.Pipeline()
	leaves := make([]*redis.Cmd, len(convs))
	for i, c := range convs {
		k := e.conv(c)
		leaves[i] = convLeave.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo},
			s.id, s.user, e.clk(), mode, grace, at)
		if mode == "grace" {
			// The grace's timer goes in the same round trip, whether or
			// not this was the user's last socket there (if not, it finds
			// nothing to do): a retry after a failure, whose leave finds
			// the socket gone, still leaves the timer scheduled.
			dueIn.Run(ctx, pipe, []string{e.kDue}, "g\t"+c+"\t"+s.user, grace, 0, e.clk())
		}
	}
	user := userDisconnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.user)}, s.user, s.id, e.clk(), mode, grace, at)
	pipe.HDel(ctx, regKey, s.id)
	if err := e.exec(ctx, pipe); err != nil {
		return nil, unavailable("disconnect", err)
	}
	var b batch
	for i, c := range convs {
		v, _ := leaves[i].Int64Slice()
		if len(v) < 3 {
			continue
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventTyping, ConversationID: c, UserID: s.user, At: now, Typing: false})
		}
		if v[1] == 1 {
			b = append(b, Event{Kind: EventLeave, ConversationID: c, UserID: s.user, At: fromMs(v[2]), Reason: reasonOf(mode)})
		}
	}
	if v, _ := user.Int64Slice(); len(v) == 2 && v[0] == 1 {
		b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Offline, LastSeen: fromMs(v[1])})
	}
	return b, nil
}

func reasonOf(mode string) string {
	switch mode {
	case "timeout":
		return ReasonTimeout
	case "left":
		return ReasonLeft
	}
	return ReasonDisconnected
}

func (e *RedisEngine) socket(id string) (*rSocket, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.local[id]
	if !ok {
		return nil, ErrUnknown
	}
	return s, nil
}

// Join implements Engine.
func (e *RedisEngine) Join(ctx context.Context, socketID, conv string) (JoinResult, error) {
	e.mu.Lock()
	s, ok := e.local[socketID]
	if !ok {
		e.mu.Unlock()
		return JoinResult{}, ErrUnknown
	}
	_, already := s.convs[conv]
	if !already && len(s.convs) >= e.cfg.MaxConversations {
		e.mu.Unlock()
		return JoinResult{}, ErrLimit
	}
	s.convs[conv] = struct{}{}
	reg := registry(s)
	e.mu.Unlock()

	now := e.cfg.Now()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	pipe.HSet(ctx, e.kNode, socketID, reg) // registered before the entry exists
	join := convJoin.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty}, socketID, s.user, e.clk())
	act := userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, s.user, e.clk(), e.cfg.AwayAfter.Milliseconds())
	if err := e.exec(ctx, pipe); err != nil {
		if !already {
			e.undoJoin(s, conv)
		}
		return JoinResult{}, unavailable("join", err)
	}
	raw, _ := join.Slice()
	var b batch
	if len(raw) == 4 && toInt(raw[0]) == 1 {
		b = append(b, Event{Kind: EventJoin, ConversationID: conv, UserID: s.user, At: now, ExceptSocket: socketID})
	}
	if n, _ := act.Int(); n == 1 {
		b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Online})
	}
	e.emit(ctx, b)
	e.cleanIfGone(s)
	if len(raw) != 4 {
		return JoinResult{}, unavailable("join", errors.New("unexpected script reply"))
	}
	return e.rosterOf(ctx, strs(raw[1]), strs(raw[2]), strs(raw[3]))
}

// undoJoin takes back a join whose outcome is unknown (the reply was lost:
// the script may have run). Once Redis confirms, the conversation leaves
// the socket's local set; until then it stays there, so that the socket's
// disconnect, or a node reap, still removes whatever entry was made. Nobody
// was told of the join, so the undo tells nobody either.
func (e *RedisEngine) undoJoin(s *rSocket, conv string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	k := e.conv(conv)
	err := convLeave.Run(ctx, e.rdb, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo},
		s.id, s.user, e.clk(), "left", 0, "").Err()
	if err != nil {
		e.log.Warn("join outcome unknown; kept for the disconnect to clean", "sid", s.id, "conversation_id", conv, "err", err)
		return
	}
	e.mu.Lock()
	delete(s.convs, conv)
	reg := registry(s)
	e.mu.Unlock()
	_ = e.rdb.HSet(ctx, e.kNode, s.id, reg).Err()
}

// rosterOf completes a roster with each member's status (one HMGET).
func (e *RedisEngine) rosterOf(ctx context.Context, users, since, typing []string) (JoinResult, error) {
	res := JoinResult{Online: make([]Member, 0, len(users)), Typing: typing}
	if res.Typing == nil {
		res.Typing = []string{}
	}
	var recs []any
	if len(users) > 0 {
		var err error
		recs, err = e.rdb.HMGet(ctx, e.kUsers, users...).Result()
		if err != nil {
			// The roster itself is known; only the online/away split is
			// not. Everyone listed has a live socket: say online.
			e.log.Warn("roster statuses unavailable; listing members as online", "err", err)
			recs = nil
		}
	}
	for i, u := range users {
		st := Away
		if recs == nil {
			st = Online
		} else if r, ok := parseUser(recs[i]); ok {
			st = r.status()
			if st == Offline {
				st = Away
			}
		}
		var sinceMs int64
		if i < len(since) {
			sinceMs, _ = strconv.ParseInt(since[i], 10, 64)
		}
		res.Online = append(res.Online, Member{UserID: u, Status: st, Since: fromMs(sinceMs)})
	}
	slices.SortFunc(res.Online, func(a, b Member) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.UserID, b.UserID))
	})
	slices.Sort(res.Typing)
	return res, nil
}

type userRec struct {
	n           int64
	act         int64
	st          string
	grace, disc int64
}

func parseUser(v any) (userRec, bool) {
	s, ok := v.(string)
	if !ok {
		return userRec{}, false
	}
	f := strings.Split(s, "|")
	if len(f) != 5 {
		return userRec{}, false
	}
	var r userRec
	r.n, _ = strconv.ParseInt(f[0], 10, 64)
	r.act, _ = strconv.ParseInt(f[1], 10, 64)
	r.st = f[2]
	r.grace, _ = strconv.ParseInt(f[3], 10, 64)
	r.disc, _ = strconv.ParseInt(f[4], 10, 64)
	return r, true
}

// status is the record's: its away timer (on Redis's clock, like the
// activity it follows) turns it away, activity back online. The node's
// clock is not compared with the activity's time.
func (r userRec) status() Status {
	if r.n == 0 && r.grace == 0 {
		return Offline
	}
	if r.st == "away" {
		return Away
	}
	return Online
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

func strs(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Leave implements Engine.
func (e *RedisEngine) Leave(ctx context.Context, socketID, conv string) error {
	e.mu.Lock()
	s, ok := e.local[socketID]
	if !ok {
		e.mu.Unlock()
		return ErrUnknown
	}
	_, in := s.convs[conv]
	e.mu.Unlock()
	now := e.cfg.Now()
	var b batch
	if in {
		k := e.conv(conv)
		pipe := e.rdb.Pipeline()
		leave := convLeave.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo}, socketID, s.user, e.clk(), "left", 0, "")
		act := userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, s.user, e.clk(), e.cfg.AwayAfter.Milliseconds())
		if err := e.exec(ctx, pipe); err != nil {
			return unavailable("leave", err)
		}
		e.mu.Lock()
		delete(s.convs, conv)
		reg := registry(s)
		e.mu.Unlock()
		if err := e.rdb.HSet(ctx, e.kNode, socketID, reg).Err(); err != nil {
			e.log.Warn("registry update failed", "sid", socketID, "err", err)
		}
		if v, _ := leave.Int64Slice(); len(v) == 3 {
			if v[0] == 1 {
				b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false})
			}
			if v[1] == 1 {
				b = append(b, Event{Kind: EventLeave, ConversationID: conv, UserID: s.user, At: now, Reason: ReasonLeft})
			}
		}
		if n, _ := act.Int(); n == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Online})
		}
	} else if err := e.Touch(ctx, socketID); err != nil {
		return err
	}
	e.emit(ctx, b)
	return nil
}

// Heartbeat implements Engine. A live socket's entries live as long as its
// node's lease (nothing re-scores them), so a heartbeat only has to record
// activity, and that at most once
// per activityEvery per user from this node: most heartbeats cost no Redis
// round trip at all, and none costs more than one whatever the number of
// conversations.
func (e *RedisEngine) Heartbeat(ctx context.Context, socketID string, active bool) error {
	if _, err := e.socket(socketID); err != nil {
		return err
	}
	if !active {
		return nil
	}
	return e.Touch(ctx, socketID)
}

// activityEvery is how stale this node lets a user's recorded activity get
// before recording it again: far below AwayAfter, so a user skipped here
// cannot be away.
func (e *RedisEngine) activityEvery() time.Duration {
	return max(100*time.Millisecond, min(5*time.Second, e.cfg.AwayAfter/10))
}

// activityDue reports whether user's activity must be sent now, and if so
// notes it as sent. The next one is due after activityEvery less up to a
// quarter, at random: users whose heartbeats started together (a node's
// restart, a benchmark) drift apart instead of all recording at the same
// moment every few seconds (a burst that held their heartbeats' acks).
func (e *RedisEngine) activityDue(user string, now time.Time) bool {
	every := e.activityEvery()
	e.mu.Lock()
	defer e.mu.Unlock()
	if next, ok := e.lastAct[user]; ok && now.Before(next) && next.Sub(now) <= every {
		return false // (a clock that went back more than every sends at once)
	}
	e.lastAct[user] = now.Add(every - time.Duration(rand.Int64N(int64(every/4)+1)))
	return true
}

// forgetActivity drops the note (the send failed, or the user's status
// changed elsewhere) so that the next activity is sent.
func (e *RedisEngine) forgetActivity(user string) {
	e.mu.Lock()
	delete(e.lastAct, user)
	e.mu.Unlock()
}

// Touch implements Engine.
func (e *RedisEngine) Touch(ctx context.Context, socketID string) error {
	s, err := e.socket(socketID)
	if err != nil {
		return err
	}
	now := e.cfg.Now()
	if !e.activityDue(s.user, now) {
		return nil
	}
	back, err := e.recordActivity(ctx, s.user)
	if err != nil {
		e.forgetActivity(s.user)
		return unavailable("activity", err)
	}
	if back {
		e.emit(ctx, batch{{Kind: EventStatus, UserID: s.user, At: now, Status: Online}})
	}
	return nil
}

func (e *RedisEngine) joinedSocket(socketID, conv string) (*rSocket, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.local[socketID]
	if !ok {
		return nil, ErrUnknown
	}
	if _, in := s.convs[conv]; !in {
		return nil, ErrNotJoined
	}
	return s, nil
}

// TypingStart implements Engine.
func (e *RedisEngine) TypingStart(ctx context.Context, socketID, conv string) error {
	return e.typing(ctx, socketID, conv, true)
}

// TypingStop implements Engine.
func (e *RedisEngine) TypingStop(ctx context.Context, socketID, conv string) error {
	return e.typing(ctx, socketID, conv, false)
}

// typing runs typingStart or typingStop with the user's activity in one
// round trip; the script answers -1 (not joined), 1 (announce) or 0.
func (e *RedisEngine) typing(ctx context.Context, socketID, conv string, start bool) error {
	s, err := e.joinedSocket(socketID, conv)
	if err != nil {
		return err
	}
	now := e.cfg.Now()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	var res *redis.Cmd
	if start {
		ttl := e.cfg.TypingTTL.Milliseconds()
		res = typingStart.Run(ctx, pipe, []string{k.ty, k.tyo, k.su}, socketID, s.user, e.clk(), ttl)
		dueIn.Run(ctx, pipe, []string{e.kDue}, "t\t"+conv, ttl, 1, e.clk())
	} else {
		res = typingStop.Run(ctx, pipe, []string{k.ty, k.tyo, k.su}, socketID, s.user, e.clk())
	}
	act := userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, s.user, e.clk(), e.cfg.AwayAfter.Milliseconds())
	if err := e.exec(ctx, pipe); err != nil {
		return unavailable("typing", err)
	}
	var b batch
	switch n, _ := res.Int(); n {
	case -1:
		return ErrNotJoined
	case 1:
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: start, ExceptSocket: socketID})
	}
	if n, _ := act.Int(); n == 1 {
		b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Online})
	}
	e.emit(ctx, b)
	return nil
}

// Roster implements Engine.
func (e *RedisEngine) Roster(ctx context.Context, conv string) (JoinResult, error) {
	k := e.conv(conv)
	raw, err := convRoster.Run(ctx, e.rdb, []string{k.on, k.m, k.ty}, e.clk()).Slice()
	if err != nil {
		return JoinResult{}, unavailable("roster", err)
	}
	if len(raw) != 3 {
		return JoinResult{}, unavailable("roster", errors.New("unexpected script reply"))
	}
	return e.rosterOf(ctx, strs(raw[0]), strs(raw[1]), strs(raw[2]))
}

// Users implements Engine: one HMGET whatever the number of ids.
func (e *RedisEngine) Users(ctx context.Context, ids []string) ([]UserPresence, error) {
	if len(ids) == 0 {
		return []UserPresence{}, nil
	}
	recs, err := e.rdb.HMGet(ctx, e.kUsers, ids...).Result()
	if err != nil {
		return nil, unavailable("users", err)
	}
	return e.usersFrom(ids, recs), nil
}

// QueueUsers queues the read of Users on a pipeline of the same Redis, so
// that a caller can join it with reads of its own in one round trip; the
// returned function gives the answer once the pipeline ran.
func (e *RedisEngine) QueueUsers(ctx context.Context, pipe redis.Pipeliner, ids []string) func() ([]UserPresence, error) {
	if len(ids) == 0 {
		return func() ([]UserPresence, error) { return []UserPresence{}, nil }
	}
	cmd := pipe.HMGet(ctx, e.kUsers, ids...)
	return func() ([]UserPresence, error) {
		recs, err := cmd.Result()
		if err != nil {
			return nil, unavailable("users", err)
		}
		return e.usersFrom(ids, recs), nil
	}
}

func (e *RedisEngine) usersFrom(ids []string, recs []any) []UserPresence {
	out := make([]UserPresence, len(ids))
	for i, id := range ids {
		out[i] = UserPresence{UserID: id, Status: Offline}
		if i >= len(recs) {
			continue
		}
		r, ok := parseUser(recs[i])
		if !ok {
			continue
		}
		out[i].Status = r.status()
		if out[i].Status != Offline {
			out[i].Since = fromMs(r.act)
		}
	}
	return out
}

// Conversations implements Engine.
func (e *RedisEngine) Conversations(socketID string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.local[socketID]
	if !ok {
		return nil
	}
	return sortedKeys(s.convs)
}

// Tick implements Engine.
func (e *RedisEngine) Tick(ctx context.Context) error {
	now := e.cfg.Now()
	var errs []error
	if e.leaseDue(now) {
		renewed, err := e.lease(ctx, now)
		switch {
		case errors.Is(err, ErrNodeIDTaken):
			return err
		case errors.Is(err, errLeaseWait):
		case err != nil:
			errs = append(errs, err)
		case renewed:
			if err := e.reapDead(ctx, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.held.Load() && now.Sub(e.lastRec) >= e.rcfg.ReconcileEvery {
		if err := e.reconcile(ctx, now); err != nil {
			errs = append(errs, err)
		} else {
			e.lastRec = now
		}
	}
	if err := e.retryPending(ctx, now); err != nil {
		errs = append(errs, err)
	}
	if err := e.runDue(ctx, now); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leaseDue reports whether the lease must be claimed or renewed now.
func (e *RedisEngine) leaseDue(now time.Time) bool {
	e.leaseMu.Lock()
	defer e.leaseMu.Unlock()
	return !e.held.Load() || e.resyncDue || now.Sub(e.lastLse) >= e.rcfg.LeaseEvery
}

// Claim takes the node id's lease before the node serves. It returns
// ErrNodeIDTaken if a live instance holds the id. A holder that does not
// renew (this node's previous process, crashed) is waited out: at most one
// lease period. A Redis error is returned (ErrUnavailable); the claim is
// then made at the first connection to Redis, by Tick or Connect, and Run
// ends with ErrNodeIDTaken if the id is taken then.
func (e *RedisEngine) Claim(ctx context.Context) error {
	for {
		_, err := e.lease(ctx, e.cfg.Now())
		if !errors.Is(err, errLeaseWait) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.rcfg.LeaseEvery / 2):
		}
	}
}

// lease claims or renews this instance's lease (one script on Redis's
// clock) and acts on the answer: renewed reports a lease renewed without a
// gap for at least the last renewal period (the caller may reap others;
// the script checks the full period).
func (e *RedisEngine) lease(ctx context.Context, now time.Time) (renewed bool, err error) {
	e.leaseMu.Lock()
	defer e.leaseMu.Unlock()
	v, err := nodeLease.Run(ctx, e.rdb, []string{e.kLease, e.kHolder, e.kReap}, e.cfg.NodeID, e.token, e.cfg.LeaseTTL.Milliseconds(), e.clk()).Int64Slice()
	if err == nil && len(v) != 3 {
		err = errors.New("unexpected script reply")
	}
	if err != nil {
		return false, unavailable("lease", err)
	}
	switch v[0] {
	case 1:
		renewed = true
	case 2:
		e.log.Warn("this node's lease had lapsed (a stall of Redis or of this node); renewed before anyone reaped it")
	case 3:
		if e.held.Load() {
			e.log.Warn("this node's lease had lapsed and its entries were reaped (or Redis lost its data); registering its sockets again")
			e.resyncDue = true
		}
	case -1:
		if e.held.Load() {
			// we lapsed, and another process took the id meanwhile
			return false, fmt.Errorf("%w (it was taken over while this node's lease had lapsed)", ErrNodeIDTaken)
		}
		if e.takenUntil == 0 {
			e.takenUntil = v[1]
		} else if v[1] != e.takenUntil {
			return false, ErrNodeIDTaken // the holder renewed: it is alive
		}
		return false, errLeaseWait
	case -2:
		return false, errLeaseWait
	default:
		return false, unavailable("lease", fmt.Errorf("unexpected lease answer %d", v[0]))
	}
	e.held.Store(true)
	e.takenUntil = 0
	e.lastLse = now
	if e.resyncDue {
		if err := e.resync(ctx); err != nil {
			return false, err
		}
		e.resyncDue = false
	}
	return renewed, nil
}

// resync registers every local socket again, after this node was reaped
// (or Redis lost its data). It is idempotent: what is still there stays.
func (e *RedisEngine) resync(ctx context.Context) error {
	now := e.cfg.Now()
	e.mu.Lock()
	var socks []*rSocket
	regs := map[string]string{}
	convs := map[string][]string{}
	for _, s := range e.local {
		socks = append(socks, s)
		regs[s.id] = registry(s)
		convs[s.id] = sortedKeys(s.convs)
	}
	e.mu.Unlock()
	var b batch
	for _, s := range socks {
		pipe := e.rdb.Pipeline()
		pipe.HSet(ctx, e.kNode, s.id, regs[s.id])
		came := userConnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.user)}, s.user, s.id, e.clk(), e.cfg.AwayAfter.Milliseconds())
		joins := make([]*redis.Cmd, len(convs[s.id]))
		for i, c := range convs[s.id] {
			k := e.conv(c)
			joins[i] = convJoin.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty}, s.id, s.user, e.clk())
		}
		if err := e.exec(ctx, pipe); err != nil {
			e.emit(ctx, b)
			return unavailable("resync", err)
		}
		if n, _ := came.Int(); n == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Online})
		}
		for i, c := range convs[s.id] {
			if raw, _ := joins[i].Slice(); len(raw) == 4 && toInt(raw[0]) == 1 {
				b = append(b, Event{Kind: EventJoin, ConversationID: c, UserID: s.user, At: now})
			}
		}
	}
	e.emit(ctx, b)
	return nil
}

// reconcile compares this node's entries in Redis (its registry) with its
// sockets, a chunk at a time: a socket the node no longer has (its leave
// or disconnect never reached Redis: a lost reply, a race with a join) is
// removed, as timed out now; a conversation a live socket no longer has is
// left. Cost: one HSCAN per thousand sockets per ReconcileEvery, plus the
// removals; nothing per user per period.
func (e *RedisEngine) reconcile(ctx context.Context, now time.Time) error {
	e.mu.Lock()
	for u, next := range e.lastAct {
		if !now.Before(next) {
			delete(e.lastAct, u)
		}
	}
	e.mu.Unlock()
	var cursor uint64
	for {
		kv, next, err := e.rdb.HScan(ctx, e.kNode, cursor, "", 1000).Result()
		if err != nil {
			return unavailable("reconcile", err)
		}
		var ghosts, stale []*rSocket
		var regs []string
		e.mu.Lock()
		for i := 0; i+1 < len(kv); i += 2 {
			sid, f := kv[i], strings.Split(kv[i+1], "\t")
			s, live := e.local[sid]
			if !live {
				_, pending := e.pending[sid]
				_, leaving := e.leaving[sid]
				if !pending && !leaving {
					ghosts = append(ghosts, &rSocket{id: sid, user: f[0], convs: setOf(f[1:])})
				}
				continue
			}
			var gone map[string]struct{}
			for _, c := range f[1:] {
				if _, in := s.convs[c]; !in {
					if gone == nil {
						gone = map[string]struct{}{}
					}
					gone[c] = struct{}{}
				}
			}
			if gone != nil {
				stale = append(stale, &rSocket{id: sid, user: s.user, convs: gone})
				regs = append(regs, registry(s))
			}
		}
		e.mu.Unlock()
		for _, g := range ghosts {
			e.log.Warn("removing an entry of a socket this node no longer has", "sid", g.id, "user_id", g.user)
			b, err := e.removeFrom(ctx, e.kNode, g, now, "timeout", time.Time{})
			e.emit(ctx, b)
			if err != nil {
				return err
			}
		}
		for i, s := range stale {
			if err := e.leaveStale(ctx, s, regs[i], now); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// leaveStale takes a live socket out of conversations it no longer has
// and corrects its registry line.
func (e *RedisEngine) leaveStale(ctx context.Context, s *rSocket, reg string, now time.Time) error {
	convs := sortedKeys(s.convs)
	pipe := e.rdb.Pipeline()
	leaves := make([]*redis.Cmd, len(convs))
	for i, c := range convs {
		k := e.conv(c)
		leaves[i] = convLeave.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo}, s.id, s.user, e.clk(), "left", 0, "")
	}
	pipe.HSet(ctx, e.kNode, s.id, reg)
	if err := e.exec(ctx, pipe); err != nil {
		return unavailable("reconcile", err)
	}
	var b batch
	for i, c := range convs {
		if v, _ := leaves[i].Int64Slice(); len(v) == 3 {
			if v[0] == 1 {
				b = append(b, Event{Kind: EventTyping, ConversationID: c, UserID: s.user, At: now, Typing: false})
			}
			if v[1] == 1 {
				b = append(b, Event{Kind: EventLeave, ConversationID: c, UserID: s.user, At: now, Reason: ReasonLeft})
			}
		}
	}
	e.emit(ctx, b)
	return nil
}

func setOf(keys []string) map[string]struct{} {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// retryPending retries the cleanup of sockets whose disconnect failed.
func (e *RedisEngine) retryPending(ctx context.Context, now time.Time) error {
	e.mu.Lock()
	var todo []*rSocket
	for _, s := range e.pending {
		todo = append(todo, s)
	}
	e.mu.Unlock()
	for _, s := range todo {
		e.mu.Lock()
		_, live := e.local[s.id]
		e.mu.Unlock()
		if live {
			continue
		}
		b, err := e.removeSocket(ctx, s, now)
		e.emit(ctx, b)
		if err != nil {
			return err
		}
		e.mu.Lock()
		delete(e.pending, s.id)
		e.mu.Unlock()
	}
	return nil
}

// reapDead cleans up after dead node instances; exactly one node claims
// each (claimDead, which also refuses a caller whose own lease is not
// established).
func (e *RedisEngine) reapDead(ctx context.Context, now time.Time) error {
	raw, err := claimDead.Run(ctx, e.rdb, []string{e.kLease, e.kHolder, e.kReap}, e.cfg.NodeID, e.token,
		e.cfg.LeaseTTL.Milliseconds(), reapClaim.Milliseconds(), e.clk()).Slice()
	if err != nil {
		return unavailable("claim dead nodes", err)
	}
	if len(raw) < 2 {
		return nil
	}
	deadline := toInt(raw[0])
	for _, x := range raw[1:] {
		item, _ := x.(string)
		f := strings.Split(item, "\t")
		if len(f) == 3 {
			lastProof, _ := strconv.ParseInt(f[2], 10, 64)
			done, err := e.reapNode(ctx, item, deadline, f[0], f[1], fromMs(lastProof), now)
			if err != nil {
				return err
			}
			if !done {
				continue // another reaper took it over
			}
			e.reaped.Inc()
			e.log.Info("reaped dead node", "dead_node", f[0], "last_lease", fromMs(lastProof))
		}
		if err := e.rdb.ZRem(ctx, e.kReap, item).Err(); err != nil {
			return unavailable("reap done", err)
		}
	}
	return nil
}

// reapNode removes every socket a dead node instance registered, as timed
// out at lastProof, a chunk at a time; before each chunk it extends its
// claim on the reap, and stops if it lost it (done false).
func (e *RedisEngine) reapNode(ctx context.Context, item string, deadline int64, node, token string, lastProof, now time.Time) (done bool, err error) {
	regKey := e.registryKey(node, token)
	for {
		kv, _, err := e.rdb.HScan(ctx, regKey, 0, "", 500).Result()
		if err != nil {
			return false, unavailable("read registry", err)
		}
		if len(kv) == 0 {
			return true, nil
		}
		deadline, err = reapHeld.Run(ctx, e.rdb, []string{e.kReap}, item, deadline, reapClaim.Milliseconds(), e.clk()).Int64()
		if err != nil {
			return false, unavailable("reap claim", err)
		}
		if deadline == 0 {
			return false, nil
		}
		var all batch
		for i := 0; i+1 < len(kv); i += 2 {
			f := strings.Split(kv[i+1], "\t")
			s := &rSocket{id: kv[i], user: f[0], convs: map[string]struct{}{}}
			for _, c := range f[1:] {
				s.convs[c] = struct{}{}
			}
			b, err := e.removeFrom(ctx, regKey, s, now, "timeout", lastProof)
			all = append(all, b...)
			if err != nil {
				e.emit(ctx, all)
				return false, err
			}
		}
		e.emit(ctx, all)
	}
}

// runDue runs the timers that are due: typing expiry, grace ends, away.
// Timers are claimed, fired, then acknowledged: a node that dies (or loses
// a reply) between the two leaves them claimed, and they fire again, on
// any node, once the claim runs out. Firing is idempotent: each script
// checks that its moment has come and its work is not done yet, and only
// a change it makes is announced.
func (e *RedisEngine) runDue(ctx context.Context, now time.Time) error {
	for range 10 { // at most 10 × 200 timers per tick
		raw, err := claimDue.Run(ctx, e.rdb, []string{e.kDue, e.kClaimed}, e.clk(), 200, timerClaim.Milliseconds()).Slice()
		if err != nil || len(raw) == 0 {
			return unavailable("timers", err)
		}
		claim, items := raw[0], raw[1:]
		if len(items) == 0 {
			return nil
		}
		var b batch
		var failed int
		ack := []any{claim, e.clk()}
		for _, x := range items {
			it, _ := x.(string)
			ev, wait, err := e.fire(ctx, it, now)
			b = append(b, ev...)
			if err != nil {
				failed++
				wait = time.Second.Milliseconds() // retried in 1s
			}
			ack = append(ack, it, wait)
		}
		e.emit(ctx, b)
		if err := ackDue.Run(ctx, e.rdb, []string{e.kDue, e.kClaimed}, ack...).Err(); err != nil {
			return unavailable("timers ack", err) // they fire again when the claim runs out
		}
		if failed > 0 {
			return unavailable("timers", fmt.Errorf("%d timers failed; retried in 1s", failed))
		}
		if len(items) < 200 {
			return nil
		}
	}
	return nil
}

// fire runs one timer and returns its events, and how long until it must
// run again (0: done). A timer that finds its moment not come yet (the
// timer's clock and the data's are different Redis servers, or a failover
// moved the clock) runs again when the time that remains has passed.
func (e *RedisEngine) fire(ctx context.Context, item string, now time.Time) (b batch, wait int64, err error) {
	f := strings.Split(item, "\t")
	switch {
	case f[0] == "t" && len(f) == 2:
		k := e.conv(f[1])
		raw, err := typingExpire.Run(ctx, e.rdb, []string{k.ty, k.tyo}, e.clk()).Slice()
		if err != nil || len(raw) != 2 {
			return nil, 0, unavailable("typing expiry", err)
		}
		for _, u := range strs(raw[0]) {
			b = append(b, Event{Kind: EventTyping, ConversationID: f[1], UserID: u, At: now, Typing: false})
		}
		return b, toInt(raw[1]), nil
	case f[0] == "g" && len(f) == 3:
		k := e.conv(f[1])
		v, err := convGrace.Run(ctx, e.rdb, []string{k.on, k.m, k.ty, k.tyo}, f[2], e.clk()).Int64Slice()
		if err != nil || len(v) != 4 {
			return nil, 0, unavailable("grace", err)
		}
		if v[2] == 1 {
			b = append(b, Event{Kind: EventTyping, ConversationID: f[1], UserID: f[2], At: now, Typing: false})
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventLeave, ConversationID: f[1], UserID: f[2], At: fromMs(v[1]), Reason: ReasonDisconnected})
		}
		return b, v[3], nil
	case f[0] == "u" && len(f) == 2:
		v, err := userGrace.Run(ctx, e.rdb, []string{e.kUsers, e.kDue}, f[1], e.clk()).Int64Slice()
		if err != nil || len(v) != 3 {
			return nil, 0, unavailable("grace", err)
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: f[1], At: now, Status: Offline, LastSeen: fromMs(v[1])})
		}
		return b, v[2], nil
	case f[0] == "a" && len(f) == 2:
		v, err := userAway.Run(ctx, e.rdb, []string{e.kUsers}, f[1], e.clk(), e.cfg.AwayAfter.Milliseconds()).Int64Slice()
		if err != nil || len(v) != 2 {
			return nil, 0, unavailable("away", err)
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: f[1], At: now, Status: Away})
		}
		return b, v[1], nil
	}
	e.log.Warn("unknown timer dropped", "timer", item)
	return nil, 0, nil
}

// Run implements Engine. It ends early, with ErrNodeIDTaken, if another
// live instance holds this node's id.
func (e *RedisEngine) Run(ctx context.Context) error {
	var fatal error
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_ = runTicker(tctx, e.cfg, func(ctx context.Context) error {
		err := e.Tick(ctx)
		switch {
		case errors.Is(err, ErrNodeIDTaken):
			fatal = err
			cancel()
		case err != nil && ctx.Err() == nil:
			e.log.Warn("presence tick failed", "err", err)
		}
		return nil
	})
	return fatal
}

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
	return nodeRelease.Run(ctx, e.rdb, []string{e.kLease, e.kHolder}, e.cfg.NodeID, e.token).Err()
}
