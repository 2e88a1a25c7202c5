package lastseen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/boundedmap"
	"github.com/presenced/presenced/store"
)

// PrivacyBuckets is the number of version buckets of the privacy settings:
// a user's setting belongs to bucket PrivacyBucket(user), and a change of
// it gives that bucket a new version, which drops the cached settings of
// that bucket's users on every node (1/64 of each cache).
const PrivacyBuckets = 64

// PrivacyBucket is the version bucket of a user's setting, the same on
// every node.
func PrivacyBucket(userID string) int {
	h := uint32(2166136261) // FNV-1a, 32 bits
	for i := 0; i < len(userID); i++ {
		h ^= uint32(userID[i])
		h *= 16777619
	}
	return int(h % PrivacyBuckets)
}

// AllPrivacyBuckets lists every bucket, 0 to PrivacyBuckets-1.
func AllPrivacyBuckets() []int {
	out := make([]int, PrivacyBuckets)
	for i := range out {
		out[i] = i
	}
	return out
}

// PrivacyVersions tells the version of each bucket of privacy settings. A
// version is never used twice: a setting read from the store after a
// version was seen is current for as long as the version is.
type PrivacyVersions interface {
	// Versions returns the version of each of buckets, in order; "" for
	// a bucket that has none (Create gives it one).
	Versions(ctx context.Context, buckets []int) ([]string, error)
	// Create gives the buckets that have no version a new one.
	Create(ctx context.Context, buckets []int) error
	// Changed gives userID's bucket a new version. Call it once the
	// user's new setting is saved in the store.
	Changed(ctx context.Context, userID string) error
}

// PipelinedVersions are PrivacyVersions on Redis whose read can be queued
// on a pipeline, with the presence facts (RedisVersions).
type PipelinedVersions interface {
	PrivacyVersions
	QueueVersions(ctx context.Context, pipe redis.Pipeliner, buckets []int) func() ([]string, error)
}

// newVersion returns a version no process has used: a random process tag
// and a counter.
var newVersion = func() func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	var n atomic.Uint64
	return func() string { return tag + "." + strconv.FormatUint(n.Add(1), 36) }
}()

// LocalVersions are the versions of a single node (no Redis): every
// change goes through this process.
type LocalVersions struct {
	mu sync.Mutex
	v  [PrivacyBuckets]string
}

// NewLocalVersions returns versions for a node without Redis.
func NewLocalVersions() *LocalVersions {
	l := &LocalVersions{}
	for i := range l.v {
		l.v[i] = newVersion()
	}
	return l
}

// Versions implements PrivacyVersions.
func (l *LocalVersions) Versions(_ context.Context, buckets []int) ([]string, error) {
	out := make([]string, len(buckets))
	l.mu.Lock()
	for i, b := range buckets {
		out[i] = l.v[b]
	}
	l.mu.Unlock()
	return out, nil
}

// Create implements PrivacyVersions (every bucket has a version).
func (l *LocalVersions) Create(context.Context, []int) error { return nil }

// Changed implements PrivacyVersions.
func (l *LocalVersions) Changed(_ context.Context, userID string) error {
	v := newVersion()
	l.mu.Lock()
	l.v[PrivacyBucket(userID)] = v
	l.mu.Unlock()
	return nil
}

// RedisVersions keep the versions in one Redis hash shared by every node,
// <prefix>:{privacy}:versions (bucket → version). A bucket the hash lacks
// (a new deployment, a Redis restart without persistence) has no version
// until a reader creates one (HSETNX): nothing is cached for it meanwhile.
type RedisVersions struct {
	c   redis.UniversalClient
	key string
}

// NewRedisVersions returns the versions on client, under prefix
// (PRESENCE_REDIS_PREFIX; "" is DefaultPrefix).
func NewRedisVersions(client redis.UniversalClient, prefix string) *RedisVersions {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &RedisVersions{c: client, key: prefix + ":{privacy}:versions"}
}

// Key is the hash of versions.
func (r *RedisVersions) Key() string { return r.key }

func bucketFields(buckets []int) []string {
	f := make([]string, len(buckets))
	for i, b := range buckets {
		f[i] = strconv.Itoa(b)
	}
	return f
}

// QueueVersions implements PipelinedVersions: one HMGET.
func (r *RedisVersions) QueueVersions(ctx context.Context, pipe redis.Pipeliner, buckets []int) func() ([]string, error) {
	if len(buckets) == 0 {
		return func() ([]string, error) { return []string{}, nil }
	}
	cmd := pipe.HMGet(ctx, r.key, bucketFields(buckets)...)
	return func() ([]string, error) {
		vals, err := cmd.Result()
		if err != nil {
			return nil, redisErr("privacy versions", err)
		}
		out := make([]string, len(buckets))
		for i := range out {
			if i < len(vals) {
				out[i], _ = vals[i].(string)
			}
		}
		return out, nil
	}
}

// Versions implements PrivacyVersions.
func (r *RedisVersions) Versions(ctx context.Context, buckets []int) ([]string, error) {
	pipe := r.c.Pipeline()
	get := r.QueueVersions(ctx, pipe, buckets)
	if len(buckets) > 0 {
		_, _ = pipe.Exec(ctx) // the error is read below
	}
	return get()
}

// Create implements PrivacyVersions: HSETNX, so that a version a writer
// set meanwhile stays.
func (r *RedisVersions) Create(ctx context.Context, buckets []int) error {
	pipe := r.c.Pipeline()
	for _, f := range bucketFields(buckets) {
		pipe.HSetNX(ctx, r.key, f, newVersion())
	}
	if len(buckets) == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return redisErr("privacy versions", err)
}

// Changed implements PrivacyVersions.
func (r *RedisVersions) Changed(ctx context.Context, userID string) error {
	return redisErr("privacy versions", r.c.HSet(ctx, r.key, strconv.Itoa(PrivacyBucket(userID)), newVersion()).Err())
}

// privacyCache keeps the privacy settings read from the store, each under
// the version its bucket had when it was read. A lookup uses an entry only
// if the version read along with the lookup is still that one: a change
// saved before the lookup began has given the bucket a new version (the
// REST handler saves, then calls Changed), so the entry is read again.
// That makes the cache exact, not eventually right. MaxAge only bounds how
// long an entry lives when a Changed failed after its save.
type privacyCache struct {
	v          PrivacyVersions
	maxAge     time.Duration
	maxEntries int // per bucket
	now        func() time.Time

	creating atomic.Bool // a Create is under way

	mu      sync.Mutex
	ver     [PrivacyBuckets]string // the version the bucket's entries hold under; "" none
	entries [PrivacyBuckets]map[string]privacyEntry
}

type privacyEntry struct {
	v  store.Visibility
	at time.Time
}

// privacyCacheMaxAge bounds an entry's life (see privacyCache).
const privacyCacheMaxAge = time.Minute

// privacyCacheMaxEntries bounds the settings kept, all buckets together.
const privacyCacheMaxEntries = 200_000

// privacyRead is one lookup: its hits, the store read of its misses (under
// way), and the versions the cache held for its buckets when it began. Its
// answer is a slice in the order of the ids, not a map by id, which cost a
// sixth of what a query of 1,000 ids allocated.
type privacyRead struct {
	c        *privacyCache
	read     func(ctx context.Context, ids []string) (map[string]store.Visibility, error)
	ids      []string
	out      []store.Visibility // the answer: hits, then the misses added
	hits     []int              // the positions of the hits in ids
	misses   []string
	missAt   []int    // the position of each of misses in ids (nil: misses is ids)
	buckets  []int    // the distinct buckets of ids
	snap     []string // the cache's version of each of buckets at the start
	answer   chan privacyResult
	versions func() ([]string, error) // queued on a pipeline; nil: asked after
	// the boxes of out and hits (scratch), for release
	outBox  *[]store.Visibility
	hitsBox *[]int
}

// release keeps out and hits for another lookup: the caller is done with
// the answer finish gave. A nil p is a lookup that did not happen.
func (p *privacyRead) release() {
	if p == nil {
		return
	}
	visibilityScratch.put(p.outBox, p.out)
	positionScratch.put(p.hitsBox, p.hits)
	p.out, p.hits, p.outBox, p.hitsBox = nil, nil, nil, nil
}

type privacyResult struct {
	settings map[string]store.Visibility
	err      error
}

// begin starts a lookup of ids (unique): the cached settings are taken,
// and the others are read from the store at once, in the background.
// c may be nil: everything is read from the store, every time.
func (c *privacyCache) begin(ctx context.Context, read func(ctx context.Context, ids []string) (map[string]store.Visibility, error), ids []string) *privacyRead {
	p := &privacyRead{c: c, read: read, ids: ids}
	p.out, p.outBox = visibilityScratch.get(len(ids))
	if c == nil {
		p.misses = ids
	} else {
		now := c.now()
		var hits []int
		hits, p.hitsBox = positionScratch.get(len(ids)) // most are hits: grown once
		p.hits = hits[:0]
		var seen [PrivacyBuckets]bool
		c.mu.Lock()
		for i, id := range ids {
			b := PrivacyBucket(id)
			if !seen[b] {
				seen[b] = true
				p.buckets = append(p.buckets, b)
				p.snap = append(p.snap, c.ver[b])
			}
			if e, ok := c.entries[b][id]; ok && c.ver[b] != "" && now.Sub(e.at) < c.maxAge {
				p.out[i] = e.v
				p.hits = append(p.hits, i)
				continue
			}
			p.misses = append(p.misses, id)
			p.missAt = append(p.missAt, i)
		}
		c.mu.Unlock()
	}
	if len(p.misses) > 0 {
		p.answer = make(chan privacyResult, 1)
		go func() {
			settings, err := read(ctx, p.misses)
			p.answer <- privacyResult{settings, err}
		}()
	}
	return p
}

// queue puts the read of the versions on pipe when the versions are on
// the same Redis (PipelinedVersions).
func (p *privacyRead) queue(ctx context.Context, pipe redis.Pipeliner) {
	if p.c == nil {
		return
	}
	if pv, ok := p.c.v.(PipelinedVersions); ok {
		p.versions = pv.QueueVersions(ctx, pipe, p.buckets)
	}
}

// finish returns the settings of every id, in the order of the ids: the
// store's answers, and the hits whose bucket's version has not changed
// since they were read; the others are read again.
func (p *privacyRead) finish(ctx context.Context) ([]store.Visibility, error) {
	out := p.out
	c := p.c
	type versionsResult struct {
		vers []string
		err  error
	}
	var asked chan versionsResult
	if c != nil && p.versions == nil && p.answer != nil {
		// not queued with the facts: asked alongside the store read
		asked = make(chan versionsResult, 1)
		go func() {
			vers, err := c.v.Versions(ctx, p.buckets)
			asked <- versionsResult{vers, err}
		}()
	}
	var got privacyResult
	if p.answer != nil {
		got = <-p.answer
	}
	var vers []string
	var err error
	if asked != nil {
		r := <-asked
		vers, err = r.vers, r.err
	} else if p.versions != nil {
		vers, err = p.versions()
	} else if c != nil {
		vers, err = c.v.Versions(ctx, p.buckets) // no store read to overlap
	}
	if got.err != nil {
		return nil, got.err
	}
	for j, id := range p.misses {
		i := j
		if p.missAt != nil {
			i = p.missAt[j]
		}
		out[i] = got.settings[id]
	}
	if c == nil {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("privacy versions: %w", err)
	}
	stale, missing := c.settle(p, vers, got.settings)
	if len(missing) > 0 && c.creating.CompareAndSwap(false, true) {
		// later lookups keep these buckets' settings; this one cannot.
		// One creation at a time: a burst of lookups after Redis lost
		// the versions does not send one each.
		_ = c.v.Create(ctx, missing)
		c.creating.Store(false)
	}
	if len(stale) > 0 {
		staleIDs := make([]string, len(stale))
		for j, i := range stale {
			staleIDs[j] = p.ids[i]
		}
		again, err := p.read(ctx, staleIDs)
		if err != nil {
			return nil, err
		}
		for j, i := range stale {
			out[i] = again[staleIDs[j]]
		}
		c.keep(staleIDs, again, p.buckets, vers)
	}
	return out, nil
}

// settle moves the cache's buckets to the versions read (vers, for
// p.buckets), keeps the store's answers (fresh) when their bucket's version
// is the one the lookup began with, and returns the positions of the hits
// whose version changed (stale) and the buckets without a version.
func (c *privacyCache) settle(p *privacyRead, vers []string, fresh map[string]store.Visibility) (stale, missing []int) {
	var valid [PrivacyBuckets]bool
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, b := range p.buckets {
		v := vers[i]
		if v == "" {
			missing = append(missing, b)
		}
		if c.ver[b] != v {
			c.ver[b] = v
			c.entries[b] = nil
		}
		valid[b] = v != "" && p.snap[i] == v
	}
	for _, i := range p.hits {
		if !valid[PrivacyBucket(p.ids[i])] {
			stale = append(stale, i)
		}
	}
	now := c.now()
	for _, id := range p.misses {
		if b := PrivacyBucket(id); valid[b] {
			c.putLocked(b, id, fresh[id], now)
		}
	}
	return stale, missing
}

// keep caches what the store said of ids, read after the versions vers
// (of buckets) were seen, where their bucket still has that version.
func (c *privacyCache) keep(ids []string, got map[string]store.Visibility, buckets []int, vers []string) {
	var seen [PrivacyBuckets]string
	for i, b := range buckets {
		seen[b] = vers[i]
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if b := PrivacyBucket(id); seen[b] != "" && c.ver[b] == seen[b] {
			c.putLocked(b, id, got[id], now)
		}
	}
}

func (c *privacyCache) putLocked(b int, id string, v store.Visibility, now time.Time) {
	m := c.entries[b]
	if m == nil {
		m = map[string]privacyEntry{}
		c.entries[b] = m
	}
	if _, ok := m[id]; !ok {
		boundedmap.MakeRoom(m, c.maxEntries, 1, func(e privacyEntry) bool { return now.Sub(e.at) >= c.maxAge })
	}
	m[id] = privacyEntry{v: v, at: now}
}
