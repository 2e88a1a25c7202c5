package lastseen

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redisepoch"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// DefaultPrefix is the default of PRESENCE_REDIS_PREFIX.
const DefaultPrefix = "presence"

// RedisConfig tunes NewRedis. Zero values mean the defaults.
type RedisConfig struct {
	// Prefix of every key (PRESENCE_REDIS_PREFIX), "presence" by default.
	Prefix string
	// RecordChunk bounds the users written by one script call, 1000.
	RecordChunk int
	// Keep is how long the buffer keeps in memory the times this process
	// recorded, to record them again if Redis loses them (see epoch), 2
	// minutes: longer than a flush interval, so that the times are in the
	// store by then.
	Keep time.Duration
	// Log gets a line when recorded times are written again; slog's
	// default if nil.
	Log *slog.Logger
}

// Redis is the cluster-mode Buffer, shared by every node. Its keys carry
// the hash tag {lastseen}, so the scripts' keys share one Redis Cluster
// slot:
//
//	<prefix>:{lastseen}          zset  user → last seen (Unix ms)
//	<prefix>:{lastseen}:dirty    set   users changed since their last write to the store
//	<prefix>:{lastseen}:claimed  zset  user → claim time (Unix ms), users being written
//
//	<prefix>:{lastseen}:epoch    string a random id, set by the first node to find none
//
// Every change is one Lua script (lua/*.lua), so a crash can never leave a
// user neither dirty, claimed nor written.
//
// Redis can lose the slot's keys (a restart without persistence, a Redis
// Cluster master without replica that came back empty), and with them the
// times not yet flushed: a user's last seen went back to an older one from
// the store, or to none (a black-box audit, 2026-12-07). So each process
// keeps the times it recorded for Keep, and reads the epoch before its
// first record and at each Requeue (a flush): if it changed, the keys
// were lost, and those times are recorded again.
type Redis struct {
	c                     redis.UniversalClient
	times, dirty, claimed string
	epochKey              string
	chunk                 int
	keep                  time.Duration
	log                   *slog.Logger

	mu     sync.Mutex
	epoch  string                    // the epoch last read ("" before)
	recent map[string]store.LastSeen // user → the latest time recorded here, within keep
	order  []recorded                // recent's entries in the order recorded
}

// recorded is a time recorded by this process, and when.
type recorded struct {
	user string
	at   time.Time
}

var _ Buffer = (*Redis)(nil)

var (
	//go:embed lua/record.lua
	recordLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/ack.lua
	ackLua string
	//go:embed lua/requeue.lua
	requeueLua string
	//go:embed lua/trim.lua
	trimLua string

	recordScript  = redis.NewScript(recordLua)
	claimScript   = redis.NewScript(claimLua)
	ackScript     = redis.NewScript(ackLua)
	requeueScript = redis.NewScript(requeueLua)
	trimScript    = redis.NewScript(trimLua)
)

// NewRedis returns the buffer over client (a single server, Sentinel or
// Cluster client).
func NewRedis(client redis.UniversalClient, cfg RedisConfig) *Redis {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.RecordChunk <= 0 {
		cfg.RecordChunk = 1000
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	base := cfg.Prefix + ":{lastseen}"
	return &Redis{c: client, times: base, dirty: base + ":dirty", claimed: base + ":claimed", epochKey: base + ":epoch",
		chunk: cfg.RecordChunk, keep: cfg.Keep, log: cfg.Log, recent: map[string]store.LastSeen{}}
}

// EpochKey returns the key of the buffer's epoch (see Redis).
func (r *Redis) EpochKey() string { return r.epochKey }

// Keys returns the buffer's Redis keys: times, dirty and claimed.
func (r *Redis) Keys() (times, dirty, claimed string) { return r.times, r.dirty, r.claimed }

func redisErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("lastseen: redis %s: %w: %w", op, ErrUnavailable, err)
}

// Record implements Buffer: one script call per chunk of users.
func (r *Redis) Record(ctx context.Context, entries []store.LastSeen) error {
	r.firstEpoch(ctx)
	for len(entries) > 0 {
		n := min(len(entries), r.chunk)
		args := make([]any, 0, 2*n)
		for _, e := range entries[:n] {
			args = append(args, e.UserID, timestamp.Millis(e.At))
		}
		if err := recordScript.Run(ctx, r.c, []string{r.times, r.dirty}, args...).Err(); err != nil {
			return redisErr("record", err)
		}
		r.remember(entries[:n])
		entries = entries[n:]
	}
	return nil
}

// remember keeps recorded times for keep (the latest of each user).
func (r *Redis) remember(entries []store.LastSeen) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range entries {
		if old, ok := r.recent[e.UserID]; !ok || old.At.Before(e.At) {
			r.recent[e.UserID] = e
		}
		r.order = append(r.order, recorded{e.UserID, now})
	}
	r.forgetLocked(now)
}

// forgetLocked drops the times recorded more than keep ago (a user
// recorded since keeps its latest).
func (r *Redis) forgetLocked(now time.Time) {
	i := 0
	for i < len(r.order) && now.Sub(r.order[i].at) > r.keep {
		i++
	}
	if i == 0 {
		return
	}
	last := map[string]time.Time{}
	for _, o := range r.order[i:] {
		last[o.user] = o.at
	}
	for _, o := range r.order[:i] {
		if _, again := last[o.user]; !again {
			delete(r.recent, o.user)
		}
	}
	r.order = append(r.order[:0], r.order[i:]...)
}

// firstEpoch reads the epoch before this process's first record, so that
// a loss before its first flush is found too. Until 2026-12-07 the first
// read was the first flush's (PRESENCE_LASTSEEN_FLUSH_INTERVAL in), which
// took the epoch of a Redis that had lost the times recorded before it
// for the first, and they stayed lost: a user's last seen went back to
// their connect (a black-box audit: a restart 10 s after the nodes
// started). A read that fails is made again at the next record.
func (r *Redis) firstEpoch(ctx context.Context) {
	r.mu.Lock()
	read := r.epoch != ""
	r.mu.Unlock()
	if read {
		return
	}
	epoch, err := redisepoch.Read(ctx, r.c, r.epochKey)
	if err != nil {
		return
	}
	r.mu.Lock()
	if r.epoch == "" {
		r.epoch = epoch
	}
	r.mu.Unlock()
}

// checkEpoch reads the buffer's epoch (setting this process's if there is
// none) and, if it changed since the last read, records again the times
// recorded here within keep: Redis lost them.
func (r *Redis) checkEpoch(ctx context.Context) error {
	epoch, err := redisepoch.Read(ctx, r.c, r.epochKey)
	if err != nil {
		return redisErr("epoch", err)
	}
	r.mu.Lock()
	lost := r.epoch != "" && epoch != r.epoch
	var again []store.LastSeen
	if lost {
		r.forgetLocked(time.Now())
		again = make([]store.LastSeen, 0, len(r.recent))
		for _, e := range r.recent {
			again = append(again, e)
		}
	} else {
		r.epoch = epoch
	}
	r.mu.Unlock()
	if !lost {
		return nil
	}
	r.log.Warn("redis lost the last-seen buffer (its epoch changed): recording again the times this node recorded lately", "users", len(again))
	if err := r.Record(ctx, again); err != nil {
		return err // (the epoch is still the old one: the next flush tries again)
	}
	r.mu.Lock()
	r.epoch = epoch
	r.mu.Unlock()
	return nil
}

// Raise implements Buffer: one ZADD XX GT per chunk of users, in one
// pipeline.
func (r *Redis) Raise(ctx context.Context, entries []store.LastSeen) error {
	if len(entries) == 0 {
		return nil
	}
	pipe := r.c.Pipeline()
	for len(entries) > 0 {
		n := min(len(entries), r.chunk)
		zs := make([]redis.Z, n)
		for i, e := range entries[:n] {
			zs[i] = redis.Z{Score: float64(timestamp.Millis(e.At)), Member: e.UserID}
		}
		pipe.ZAddArgs(ctx, r.times, redis.ZAddArgs{XX: true, GT: true, Members: zs})
		entries = entries[n:]
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return redisErr("raise", err)
	}
	return nil
}

// Get implements Buffer: one ZMSCORE.
func (r *Redis) Get(ctx context.Context, userIDs []string) ([]time.Time, error) {
	out := make([]time.Time, len(userIDs))
	if len(userIDs) == 0 {
		return out, nil
	}
	return times(out, r.c.ZMScore(ctx, r.times, userIDs...))
}

// times fills out from a ZMSCORE answer (0: no time).
func times(out []time.Time, cmd *redis.FloatSliceCmd) ([]time.Time, error) {
	scores, err := cmd.Result()
	if err != nil {
		return nil, redisErr("get", err)
	}
	for i, s := range scores {
		if s > 0 && i < len(out) {
			out[i] = timestamp.FromMillis(int64(s))
		}
	}
	return out, nil
}

// Pipeline starts a pipeline on the buffer's Redis (see PipelinedBuffer).
func (r *Redis) Pipeline() redis.Pipeliner { return r.c.Pipeline() }

// QueueGet queues Get on a pipeline of the same Redis, its answer into
// out (as many zero times as userIDs); the returned function gives it once
// the pipeline ran.
func (r *Redis) QueueGet(ctx context.Context, pipe redis.Pipeliner, userIDs []string, out []time.Time) func() ([]time.Time, error) {
	if len(userIDs) == 0 {
		return func() ([]time.Time, error) { return out, nil }
	}
	cmd := pipe.ZMScore(ctx, r.times, userIDs...)
	return func() ([]time.Time, error) { return times(out, cmd) }
}

// Claim implements Buffer.
func (r *Redis) Claim(ctx context.Context, n int, now time.Time) (Claim, error) {
	c := Claim{At: timestamp.Millis(now)}
	if n <= 0 {
		return c, nil
	}
	res, err := claimScript.Run(ctx, r.c, []string{r.times, r.dirty, r.claimed}, n, c.At).Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return c, nil
		}
		return c, redisErr("claim", err)
	}
	c.Entries = make([]store.LastSeen, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		id, _ := res[i].(string)
		s, _ := res[i+1].(string)
		ms, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return c, fmt.Errorf("lastseen: redis claim: bad score %q for %q", s, id)
		}
		c.Entries = append(c.Entries, store.LastSeen{UserID: id, At: timestamp.FromMillis(int64(ms))})
	}
	return c, nil
}

// Ack implements Buffer.
func (r *Redis) Ack(ctx context.Context, c Claim) error {
	return redisErr("ack", r.end(ctx, c, "0"))
}

// Release implements Buffer.
func (r *Redis) Release(ctx context.Context, c Claim) error {
	return redisErr("release", r.end(ctx, c, "1"))
}

func (r *Redis) end(ctx context.Context, c Claim, release string) error {
	for len(c.Entries) > 0 {
		n := min(len(c.Entries), r.chunk)
		args := make([]any, 0, 2+n)
		args = append(args, c.At, release)
		for _, e := range c.Entries[:n] {
			args = append(args, e.UserID)
		}
		if err := ackScript.Run(ctx, r.c, []string{r.claimed, r.dirty}, args...).Err(); err != nil {
			return err
		}
		c.Entries = c.Entries[n:]
	}
	return nil
}

// Requeue implements Buffer. It reads the epoch first (checkEpoch): every
// flush does, on every node.
func (r *Redis) Requeue(ctx context.Context, cutoff time.Time) (int, error) {
	if err := r.checkEpoch(ctx); err != nil {
		// (the flush goes on: it is tried again at the next one)
		r.log.Warn("last-seen buffer: reading its epoch or recording again what Redis lost failed", "err", err)
	}
	total := 0
	for {
		n, err := requeueScript.Run(ctx, r.c, []string{r.claimed, r.dirty}, timestamp.Millis(cutoff), r.chunk).Int()
		if err != nil {
			return total, redisErr("requeue", err)
		}
		total += n
		if n < r.chunk {
			return total, nil
		}
	}
}

// Trim implements Buffer.
func (r *Redis) Trim(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := trimScript.Run(ctx, r.c, []string{r.times, r.dirty, r.claimed}, timestamp.Millis(cutoff), limit).Int()
	return n, redisErr("trim", err)
}

// Stats implements Buffer: one pipelined round trip.
func (r *Redis) Stats(ctx context.Context) (BufferStats, error) {
	var users, dirty, claimed *redis.IntCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		users = p.ZCard(ctx, r.times)
		dirty = p.SCard(ctx, r.dirty)
		claimed = p.ZCard(ctx, r.claimed)
		return nil
	})
	if err != nil {
		return BufferStats{}, redisErr("stats", err)
	}
	return BufferStats{Users: users.Val(), Dirty: dirty.Val(), Claimed: claimed.Val()}, nil
}
