package presence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig configures the Redis backend. Zero values mean the defaults.
type RedisConfig struct {
	Prefix string // key prefix, default "presence"
	// RefreshEvery is how often a node re-scores its live sockets (default
	// TTL/3; the work is spread over the period, see refreshSlices);
	// LeaseEvery how often it renews its lease (default 1s).
	RefreshEvery time.Duration
	LeaseEvery   time.Duration
	// RefreshBatch is the number of commands per pipelined round trip of
	// the refresh (default 1000).
	RefreshBatch int
	Log          *slog.Logger
}

// RedisEngine is one node's Engine over Redis (cluster mode).
type RedisEngine struct {
	rdb  redis.UniversalClient
	cfg  Config
	rcfg RedisConfig
	log  *slog.Logger

	kUsers, kDue, kNodes, kReap, kNode string

	mu        sync.Mutex
	local     map[string]*rSocket  // this node's sockets
	lastAct   map[string]time.Time // user → when this node next sends the user's activity
	pending   map[string]*rSocket  // disconnected sockets whose cleanup failed; retried by Tick
	lastRef   time.Time            // the refresh schedule: the last slice's time
	nextSlice uint                 // and the slice due next
	lastLse   time.Time
	selfDone  bool

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
	if rcfg.RefreshEvery <= 0 {
		rcfg.RefreshEvery = cfg.TTL / 3
	}
	if rcfg.LeaseEvery <= 0 {
		rcfg.LeaseEvery = min(time.Second, cfg.LeaseTTL/3)
	}
	if rcfg.RefreshBatch <= 0 {
		rcfg.RefreshBatch = 1000
	}
	if rcfg.Log == nil {
		rcfg.Log = slog.New(slog.DiscardHandler)
	}
	p := rcfg.Prefix
	return &RedisEngine{
		rdb: rdb, cfg: cfg, rcfg: rcfg, log: rcfg.Log,
		kUsers: p + ":{g}:users", kDue: p + ":{g}:due", kNodes: p + ":{g}:nodes", kReap: p + ":{g}:reap",
		kNode: p + ":{n:" + cfg.NodeID + "}:socks",
		local: map[string]*rSocket{}, pending: map[string]*rSocket{}, lastAct: map[string]time.Time{},
	}
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
	typingExpire, userConnect, userDisconnect, userGrace, userActivity, userAway, popDue, claimDead}

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

func (e *RedisEngine) keyTTL() int64 { return (3 * e.cfg.TTL).Milliseconds() }

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

// Connect implements Engine.
func (e *RedisEngine) Connect(ctx context.Context, s Socket) error {
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
	pipe.ZAddNX(ctx, e.kNodes, redis.Z{Score: float64(ms(now)), Member: e.cfg.NodeID})
	pipe.HSet(ctx, e.kNode, s.ID, reg)
	came := userConnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.UserID)}, s.UserID, s.ID, ms(now), e.cfg.AwayAfter.Milliseconds())
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
	return nil
}

// Disconnect implements Engine.
func (e *RedisEngine) Disconnect(ctx context.Context, socketID string) error {
	e.mu.Lock()
	s, ok := e.local[socketID]
	if ok {
		delete(e.local, socketID)
	}
	e.mu.Unlock()
	if !ok {
		return nil
	}
	now := e.cfg.Now()
	b, err := e.removeSocket(ctx, s, now, "grace", now)
	e.emit(ctx, b)
	if err != nil {
		// keep it for Tick to retry: no entry is left behind for good
		e.mu.Lock()
		e.pending[socketID] = s
		e.mu.Unlock()
		return err
	}
	return nil
}

// removeSocket removes a socket from its conversations and user in one
// pipelined round trip, then schedules the grace timers. mode "grace" or
// "timeout" (then at is the last proof of life).
func (e *RedisEngine) removeSocket(ctx context.Context, s *rSocket, now time.Time, mode string, at time.Time) (batch, error) {
	return e.removeFrom(ctx, e.kNode, s, now, mode, at)
}

func (e *RedisEngine) removeFrom(ctx context.Context, regKey string, s *rSocket, now time.Time, mode string, at time.Time) (batch, error) {
	deadline := now.Add(e.cfg.FlapGrace)
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
			s.id, s.user, ms(now), mode, ms(deadline), ms(at))
	}
	user := userDisconnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.user)}, s.user, s.id, ms(now), mode, ms(deadline), ms(at))
	pipe.HDel(ctx, regKey, s.id)
	if err := e.exec(ctx, pipe); err != nil {
		return nil, unavailable("disconnect", err)
	}
	var b batch
	var due []redis.Z
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
		} else if mode == "grace" {
			due = append(due, redis.Z{Score: float64(ms(deadline)), Member: "g\t" + c + "\t" + s.user})
		}
	}
	if v, _ := user.Int64Slice(); len(v) == 2 && v[0] == 1 {
		b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Offline, LastSeen: fromMs(v[1])})
	}
	if len(due) > 0 {
		if err := e.rdb.ZAdd(ctx, e.kDue, due...).Err(); err != nil {
			return b, unavailable("schedule grace", err)
		}
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
	join := convJoin.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty}, socketID, s.user, ms(now), e.keyTTL())
	act := userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, s.user, ms(now), e.cfg.AwayAfter.Milliseconds())
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
	if len(raw) != 4 {
		return JoinResult{}, unavailable("join", errors.New("unexpected script reply"))
	}
	return e.rosterOf(ctx, strs(raw[1]), strs(raw[2]), strs(raw[3]), now)
}

// undoJoin takes back a join whose outcome is unknown (the reply was lost:
// the script may have run). Once Redis confirms, the conversation leaves
// the socket's local set; until then it stays there, so that the socket's
// disconnect, or a node reap, still removes whatever entry was made. Nobody
// was told of the join, so the undo tells nobody either.
func (e *RedisEngine) undoJoin(s *rSocket, conv string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := e.cfg.Now()
	k := e.conv(conv)
	err := convLeave.Run(ctx, e.rdb, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo},
		s.id, s.user, ms(now), "left", 0, ms(now)).Err()
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
func (e *RedisEngine) rosterOf(ctx context.Context, users, since, typing []string, now time.Time) (JoinResult, error) {
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
			st = r.status(now, e.cfg.AwayAfter)
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

func (r userRec) status(now time.Time, awayAfter time.Duration) Status {
	if r.n == 0 && r.grace == 0 {
		return Offline
	}
	if ms(now)-r.act >= awayAfter.Milliseconds() {
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
		leave := convLeave.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo}, socketID, s.user, ms(now), "left", 0, ms(now))
		act := userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, s.user, ms(now), e.cfg.AwayAfter.Milliseconds())
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

// Heartbeat implements Engine. A live socket's entries are re-scored by
// the node's batched refresh (every TTL/3) and its liveness is the node's
// lease, so a heartbeat only has to record activity, and that at most once
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

// refreshConv re-scores a socket's entries in a conversation (only if they
// exist: XX) and extends the keys' lifetime.
func (e *RedisEngine) refreshConv(ctx context.Context, pipe redis.Pipeliner, conv, sid, user string, now time.Time) {
	k := e.conv(conv)
	score := float64(ms(now))
	pipe.ZAddArgs(ctx, k.sk, redis.ZAddArgs{XX: true, Members: []redis.Z{{Score: score, Member: sid}}})
	pipe.ZAddArgs(ctx, k.on, redis.ZAddArgs{XX: true, GT: true, Members: []redis.Z{{Score: score, Member: user}}})
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
	back, err := e.recordActivity(ctx, s.user, now)
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
		expiry := now.Add(e.cfg.TypingTTL)
		res = typingStart.Run(ctx, pipe, []string{k.ty, k.tyo, k.su}, socketID, s.user, ms(now), ms(expiry))
		pipe.ZAddArgs(ctx, e.kDue, redis.ZAddArgs{LT: true, Members: []redis.Z{{Score: float64(ms(expiry)), Member: "t\t" + conv}}})
	} else {
		res = typingStop.Run(ctx, pipe, []string{k.ty, k.tyo, k.su}, socketID, s.user, ms(now))
	}
	act := userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, s.user, ms(now), e.cfg.AwayAfter.Milliseconds())
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
	now := e.cfg.Now()
	k := e.conv(conv)
	raw, err := convRoster.Run(ctx, e.rdb, []string{k.on, k.m, k.ty}, ms(now)).Slice()
	if err != nil {
		return JoinResult{}, unavailable("roster", err)
	}
	if len(raw) != 3 {
		return JoinResult{}, unavailable("roster", errors.New("unexpected script reply"))
	}
	return e.rosterOf(ctx, strs(raw[0]), strs(raw[1]), strs(raw[2]), now)
}

// Users implements Engine: one HMGET whatever the number of ids.
func (e *RedisEngine) Users(ctx context.Context, ids []string) ([]UserPresence, error) {
	if len(ids) == 0 {
		return []UserPresence{}, nil
	}
	now := e.cfg.Now()
	recs, err := e.rdb.HMGet(ctx, e.kUsers, ids...).Result()
	if err != nil {
		return nil, unavailable("users", err)
	}
	return e.usersFrom(ids, recs, now), nil
}

// QueueUsers queues the read of Users on a pipeline of the same Redis, so
// that a caller can join it with reads of its own in one round trip; the
// returned function gives the answer once the pipeline ran.
func (e *RedisEngine) QueueUsers(ctx context.Context, pipe redis.Pipeliner, ids []string) func() ([]UserPresence, error) {
	if len(ids) == 0 {
		return func() ([]UserPresence, error) { return []UserPresence{}, nil }
	}
	now := e.cfg.Now()
	cmd := pipe.HMGet(ctx, e.kUsers, ids...)
	return func() ([]UserPresence, error) {
		recs, err := cmd.Result()
		if err != nil {
			return nil, unavailable("users", err)
		}
		return e.usersFrom(ids, recs, now), nil
	}
}

func (e *RedisEngine) usersFrom(ids []string, recs []any, now time.Time) []UserPresence {
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
		out[i].Status = r.status(now, e.cfg.AwayAfter)
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
	if !e.selfDone {
		// A node restarted under the same id: what its previous process
		// left in the registry is dead.
		if err := e.reapNode(ctx, e.cfg.NodeID, now, now, true); err != nil {
			errs = append(errs, err)
		} else {
			e.selfDone = true
		}
	}
	if now.Sub(e.lastLse) >= e.rcfg.LeaseEvery {
		added, err := e.rdb.ZAdd(ctx, e.kNodes, redis.Z{Score: float64(ms(now)), Member: e.cfg.NodeID}).Result()
		switch {
		case err != nil:
			errs = append(errs, unavailable("lease", err))
		case added == 1 && !e.lastLse.IsZero():
			// Our lease had lapsed (a long pause, a partition) and another
			// node reaped our entries: put them back.
			e.log.Warn("this node's lease had lapsed; re-registering its sockets")
			if err := e.resync(ctx, now); err != nil {
				errs = append(errs, err)
				break
			}
			e.lastLse = now
		default:
			e.lastLse = now
		}
		if err := e.reapDead(ctx, now); err != nil {
			errs = append(errs, err)
		}
	}
	lastRef, next := e.lastRef, e.nextSlice
	if due := e.dueSlices(now); due != 0 {
		if err := e.refresh(ctx, now, due); err != nil {
			errs = append(errs, err)
			e.lastRef, e.nextSlice = lastRef, next // due again next tick
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

// resync registers every local socket again, after this node was reaped.
func (e *RedisEngine) resync(ctx context.Context, now time.Time) error {
	e.mu.Lock()
	var socks []*rSocket
	regs := map[string]string{}
	for _, s := range e.local {
		socks = append(socks, s)
		regs[s.id] = registry(s)
	}
	convs := map[string][]string{}
	for _, s := range socks {
		convs[s.id] = sortedKeys(s.convs)
	}
	e.mu.Unlock()
	var b batch
	for _, s := range socks {
		pipe := e.rdb.Pipeline()
		pipe.HSet(ctx, e.kNode, s.id, regs[s.id])
		came := userConnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.user)}, s.user, s.id, ms(now), e.cfg.AwayAfter.Milliseconds())
		joins := make([]*redis.Cmd, len(convs[s.id]))
		for i, c := range convs[s.id] {
			k := e.conv(c)
			joins[i] = convJoin.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty}, s.id, s.user, ms(now), e.keyTTL())
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

// The refresh is spread over its period: conversation c is re-scored in
// slice sliceOf(c), and one of refreshSlices slices is due every
// RefreshEvery/refreshSlices. Each entry is still re-scored every
// RefreshEvery, but a node with many sockets sends a fifteenth of the
// commands each second instead of all of them at once (a burst of
// commands, garbage and engine-lock time that showed in the heartbeats'
// tail latency).
const refreshSlices = 15

const allSlices = 1<<refreshSlices - 1

func sliceOf(conv string) uint {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(conv); i++ {
		h ^= uint32(conv[i])
		h *= 16777619
	}
	return uint(h % refreshSlices)
}

// dueSlices returns the slices due at now (a bit per slice) and moves the
// schedule past them. A node far behind (its first tick, a long pause)
// refreshes every slice at once and starts the schedule again from now.
func (e *RedisEngine) dueSlices(now time.Time) uint32 {
	period := max(e.rcfg.RefreshEvery/refreshSlices, time.Millisecond)
	var due uint32
	for n := 0; n < refreshSlices && now.Sub(e.lastRef) >= period; n++ {
		due |= 1 << e.nextSlice
		e.nextSlice = (e.nextSlice + 1) % refreshSlices
		e.lastRef = e.lastRef.Add(period)
	}
	if now.Sub(e.lastRef) >= period {
		e.lastRef = now
	}
	return due
}

// refresh re-scores the local sockets' entries in the conversations of the
// due slices, many per round trip.
func (e *RedisEngine) refresh(ctx context.Context, now time.Time, due uint32) error {
	type item struct{ sid, user, conv string }
	e.mu.Lock()
	if due&1 != 0 {
		for u, next := range e.lastAct {
			if !now.Before(next) {
				delete(e.lastAct, u)
			}
		}
	}
	// held under mu: sized for no regrowth
	items := make([]item, 0, 3*len(e.local)*bits.OnesCount32(due)/refreshSlices+16)
	for _, s := range e.local {
		for c := range s.convs {
			if due == allSlices || due&(1<<sliceOf(c)) != 0 {
				items = append(items, item{s.id, s.user, c})
			}
		}
	}
	e.mu.Unlock()
	per := max(1, e.rcfg.RefreshBatch/2)
	expired := map[string]bool{}
	for start := 0; start < len(items); start += per {
		pipe := e.rdb.Pipeline()
		for _, it := range items[start:min(start+per, len(items))] {
			e.refreshConv(ctx, pipe, it.conv, it.sid, it.user, now)
			if !expired[it.conv] {
				expired[it.conv] = true
				k := e.conv(it.conv)
				for _, key := range []string{k.on, k.sk, k.su, k.m} {
					pipe.PExpire(ctx, key, 3*e.cfg.TTL)
				}
			}
		}
		if err := e.exec(ctx, pipe); err != nil {
			return unavailable("refresh", err)
		}
	}
	return nil
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
		b, err := e.removeSocket(ctx, s, now, "grace", now)
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

// reapDead cleans up after nodes whose lease lapsed; exactly one node
// claims each.
func (e *RedisEngine) reapDead(ctx context.Context, now time.Time) error {
	items, err := claimDead.Run(ctx, e.rdb, []string{e.kNodes, e.kReap}, ms(now), e.cfg.LeaseTTL.Milliseconds(), (30 * time.Second).Milliseconds()).StringSlice()
	if err != nil {
		return unavailable("claim dead nodes", err)
	}
	for _, item := range items {
		node, leaseStr, _ := strings.Cut(item, "\t")
		lease, _ := strconv.ParseInt(leaseStr, 10, 64)
		if node == e.cfg.NodeID {
			// we were presumed dead (a long pause): our sockets are gone
			// from Redis; forget them locally too so they reconnect cleanly
			e.log.Warn("this node's lease lapsed; its presence entries were reaped")
		}
		if err := e.reapNode(ctx, node, fromMs(lease), now, false); err != nil {
			return err
		}
		if err := e.rdb.ZRem(ctx, e.kReap, item).Err(); err != nil {
			return unavailable("reap done", err)
		}
		e.log.Info("reaped dead node", "dead_node", node, "last_lease", fromMs(lease))
	}
	return nil
}

// reapNode removes every socket a node registered, as timed out at
// lastProof. self: the previous process of this node id.
func (e *RedisEngine) reapNode(ctx context.Context, node string, lastProof, now time.Time, self bool) error {
	regKey := e.rcfg.Prefix + ":{n:" + node + "}:socks"
	entries, err := e.rdb.HGetAll(ctx, regKey).Result()
	if err != nil {
		return unavailable("read registry", err)
	}
	e.mu.Lock()
	for sid := range entries {
		if self {
			if _, live := e.local[sid]; live {
				delete(entries, sid) // registered by this process
			}
		}
	}
	e.mu.Unlock()
	if self && len(entries) > 0 {
		if t, err := e.rdb.ZScore(ctx, e.kNodes, node).Result(); err == nil {
			lastProof = fromMs(int64(t))
		}
	}
	var all batch
	for _, sid := range sortedKeys(entries) {
		f := strings.Split(entries[sid], "\t")
		s := &rSocket{id: sid, user: f[0], convs: map[string]struct{}{}}
		for _, c := range f[1:] {
			s.convs[c] = struct{}{}
		}
		b, err := e.removeFrom(ctx, regKey, s, now, "timeout", lastProof)
		all = append(all, b...)
		if err != nil {
			e.emit(ctx, all)
			return err
		}
	}
	e.emit(ctx, all)
	return nil
}

// runDue runs the timers that are due: typing expiry, grace ends, away.
func (e *RedisEngine) runDue(ctx context.Context, now time.Time) error {
	for range 10 { // at most 10 × 200 timers per tick
		items, err := popDue.Run(ctx, e.rdb, []string{e.kDue}, ms(now), 200).StringSlice()
		if err != nil {
			return unavailable("timers", err)
		}
		if len(items) == 0 {
			return nil
		}
		var b batch
		var failed []redis.Z
		for _, it := range items {
			ev, err := e.fire(ctx, it, now)
			b = append(b, ev...)
			if err != nil {
				failed = append(failed, redis.Z{Score: float64(ms(now.Add(time.Second))), Member: it})
			}
		}
		e.emit(ctx, b)
		if len(failed) > 0 {
			_ = e.rdb.ZAdd(ctx, e.kDue, failed...).Err()
			return unavailable("timers", errors.New("some timers failed; retried in 1s"))
		}
		if len(items) < 200 {
			return nil
		}
	}
	return nil
}

func (e *RedisEngine) fire(ctx context.Context, item string, now time.Time) (batch, error) {
	f := strings.Split(item, "\t")
	switch {
	case f[0] == "t" && len(f) == 2:
		k := e.conv(f[1])
		raw, err := typingExpire.Run(ctx, e.rdb, []string{k.ty, k.tyo}, ms(now)).Slice()
		if err != nil || len(raw) != 2 {
			return nil, unavailable("typing expiry", err)
		}
		var b batch
		for _, u := range strs(raw[0]) {
			b = append(b, Event{Kind: EventTyping, ConversationID: f[1], UserID: u, At: now, Typing: false})
		}
		if next := toInt(raw[1]); next > 0 {
			e.rdb.ZAddArgs(ctx, e.kDue, redis.ZAddArgs{LT: true, Members: []redis.Z{{Score: float64(next), Member: item}}})
		}
		return b, nil
	case f[0] == "g" && len(f) == 3:
		k := e.conv(f[1])
		v, err := convGrace.Run(ctx, e.rdb, []string{k.on, k.m, k.ty, k.tyo}, f[2], ms(now)).Int64Slice()
		if err != nil || len(v) != 3 {
			return nil, unavailable("grace", err)
		}
		var b batch
		if v[2] == 1 {
			b = append(b, Event{Kind: EventTyping, ConversationID: f[1], UserID: f[2], At: now, Typing: false})
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventLeave, ConversationID: f[1], UserID: f[2], At: fromMs(v[1]), Reason: ReasonDisconnected})
		}
		return b, nil
	case f[0] == "u" && len(f) == 2:
		v, err := userGrace.Run(ctx, e.rdb, []string{e.kUsers, e.kDue}, f[1], ms(now)).Int64Slice()
		if err != nil || len(v) != 2 {
			return nil, unavailable("grace", err)
		}
		if v[0] == 1 {
			return batch{{Kind: EventStatus, UserID: f[1], At: now, Status: Offline, LastSeen: fromMs(v[1])}}, nil
		}
		return nil, nil
	case f[0] == "a" && len(f) == 2:
		n, err := userAway.Run(ctx, e.rdb, []string{e.kUsers}, f[1], ms(now), e.cfg.AwayAfter.Milliseconds()).Int()
		if err != nil {
			return nil, unavailable("away", err)
		}
		if n == 1 {
			return batch{{Kind: EventStatus, UserID: f[1], At: now, Status: Away}}, nil
		}
		return nil, nil
	}
	e.log.Warn("unknown timer dropped", "timer", item)
	return nil, nil
}

// Run implements Engine.
func (e *RedisEngine) Run(ctx context.Context) error {
	return runTicker(ctx, e.cfg, func(ctx context.Context) error {
		if err := e.Tick(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("presence tick failed", "err", err)
		}
		return nil
	})
}

// Close implements Engine: the node leaves the lease set so that survivors
// do not reap it (its sockets were disconnected by the shutdown).
func (e *RedisEngine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e.mu.Lock()
	live := len(e.local) + len(e.pending)
	e.mu.Unlock()
	if live > 0 {
		return nil // leave the lease to lapse: survivors reap what is left
	}
	return e.rdb.ZRem(ctx, e.kNodes, e.cfg.NodeID).Err()
}
