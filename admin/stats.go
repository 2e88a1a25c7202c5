package admin

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/timestamp"
	"github.com/redis/go-redis/v9"
)

// Sample is one point of a node's history: unix ms, sockets, events/s.
type Sample struct {
	T       int64   `json:"t"`
	Sockets int64   `json:"s"`
	EPS     float64 `json:"e"`
}

// NodeStats is what a node publishes about itself every PublishEvery.
type NodeStats struct {
	Node         string    `json:"node"`
	At           time.Time `json:"at"`
	Sockets      int64     `json:"sockets"`
	RSSBytes     uint64    `json:"rssBytes"`
	HeapBytes    uint64    `json:"heapBytes"`
	Goroutines   int       `json:"goroutines"`
	EventsPerSec float64   `json:"eventsPerSec"`
	History      []Sample  `json:"history"` // oldest first
	Flush        FlushView `json:"flush"`   // this node's last last-seen flush
}

// FlushView is a node's last last-seen flush.
type FlushView struct {
	At         *string `json:"at"` // null: none yet
	Ms         float64 `json:"ms"`
	Rows       int64   `json:"rows"`
	Statements int64   `json:"statements"`
	Error      string  `json:"error,omitempty"`
	Errors     int64   `json:"errors"` // failed flushes since start
}

// historyLen samples: 5 minutes at the default 2 s.
const historyLen = 150

// sampler measures this node and keeps its recent history.
type sampler struct {
	node    string
	sockets func() int64
	events  func() float64
	flush   func() FlushView

	mu         sync.Mutex
	last       NodeStats
	history    []Sample
	prevEvents float64
	prevAt     time.Time
}

var heapMetric = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// rss reads the resident set size (Linux; 0 elsewhere).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

func (s *sampler) sample(now time.Time) NodeStats {
	heap := make([]metrics.Sample, len(heapMetric))
	copy(heap, heapMetric)
	metrics.Read(heap)
	events := s.events()

	s.mu.Lock()
	defer s.mu.Unlock()
	st := NodeStats{
		Node:       s.node,
		At:         now.UTC(),
		Sockets:    s.sockets(),
		RSSBytes:   rss(),
		Goroutines: runtime.NumGoroutine(),
		Flush:      s.flush(),
	}
	if heap[0].Value.Kind() == metrics.KindUint64 {
		st.HeapBytes = heap[0].Value.Uint64()
	}
	if !s.prevAt.IsZero() {
		if d := now.Sub(s.prevAt).Seconds(); d > 0 && events >= s.prevEvents {
			st.EventsPerSec = (events - s.prevEvents) / d
		}
	}
	s.prevEvents, s.prevAt = events, now
	s.history = append(s.history, Sample{T: now.UnixMilli(), Sockets: st.Sockets, EPS: st.EventsPerSec})
	if len(s.history) > historyLen {
		s.history = append(s.history[:0], s.history[len(s.history)-historyLen:]...)
	}
	st.History = append([]Sample(nil), s.history...)
	s.last = st
	return st
}

func (s *sampler) latest() NodeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.last
	st.History = append([]Sample(nil), s.history...)
	return st
}

// The Redis side: each node writes its stats into a hash of its own
// ("P:admin:node:<id>", expiring after statsTTL) and its id into a sorted
// set ("P:admin:nodes", scored by the time), which the panel reads.
const statsTTL = 10 * time.Second

func (p *Panel) nodeKey(node string) string { return p.cfg.Prefix + ":admin:node:" + node }
func (p *Panel) nodesKey() string           { return p.cfg.Prefix + ":admin:nodes" }

func (p *Panel) publish(ctx context.Context, st NodeStats) error {
	hist, _ := json.Marshal(st.History)
	flush, _ := json.Marshal(st.Flush)
	now := st.At
	pipe := p.d.Redis.Pipeline()
	key := p.nodeKey(st.Node)
	pipe.HSet(ctx, key, map[string]any{
		"node":       st.Node,
		"at":         now.UnixMilli(),
		"sockets":    st.Sockets,
		"rss":        st.RSSBytes,
		"heap":       st.HeapBytes,
		"goroutines": st.Goroutines,
		"eps":        strconv.FormatFloat(st.EventsPerSec, 'f', 3, 64),
		"history":    string(hist),
		"flush":      string(flush),
	})
	pipe.PExpire(ctx, key, statsTTL)
	pipe.ZAdd(ctx, p.nodesKey(), redis.Z{Score: float64(now.UnixMilli()), Member: st.Node})
	pipe.ZRemRangeByScore(ctx, p.nodesKey(), "-inf", strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10))
	_, err := pipe.Exec(ctx)
	return err
}

// unpublish takes this node's stats away (it stops): the other nodes'
// panels drop it at once instead of showing its last figures until they
// expire.
func (p *Panel) unpublish() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := p.d.Redis.Pipeline()
	pipe.Del(ctx, p.nodeKey(p.cfg.NodeID))
	pipe.ZRem(ctx, p.nodesKey(), p.cfg.NodeID)
	if _, err := pipe.Exec(ctx); err != nil {
		p.log.Debug("admin stats not taken away", "err", err)
	}
}

// clusterStats reads every node's published stats (this node's from
// memory when Redis is off).
func (p *Panel) clusterStats(ctx context.Context) ([]NodeStats, error) {
	self := p.stats.latest()
	// this node's counts are read now (the rest is the last sample)
	self.Sockets, self.Goroutines, self.Flush = p.d.Sockets.Open(), runtime.NumGoroutine(), p.flushView()
	if p.d.Redis == nil {
		return []NodeStats{self}, nil
	}
	now := time.Now()
	ids, err := p.d.Redis.ZRangeByScore(ctx, p.nodesKey(), &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-statsTTL).UnixMilli(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return []NodeStats{self}, err
	}
	pipe := p.d.Redis.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, p.nodeKey(id))
	}
	if len(ids) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	out := []NodeStats{self}
	for i, id := range ids {
		if id == self.Node {
			continue
		}
		h := cmds[i].Val()
		if len(h) == 0 {
			continue
		}
		st := NodeStats{Node: id}
		at, _ := strconv.ParseInt(h["at"], 10, 64)
		st.At = timestamp.FromMillis(at)
		st.Sockets, _ = strconv.ParseInt(h["sockets"], 10, 64)
		st.RSSBytes, _ = strconv.ParseUint(h["rss"], 10, 64)
		st.HeapBytes, _ = strconv.ParseUint(h["heap"], 10, 64)
		st.Goroutines, _ = strconv.Atoi(h["goroutines"])
		// (a NaN or an infinity, which ParseFloat takes and JSON cannot
		// write, made the whole view fail: only a foreign writer puts one)
		if eps, err := strconv.ParseFloat(h["eps"], 64); err == nil && !math.IsNaN(eps) && !math.IsInf(eps, 0) {
			st.EventsPerSec = eps
		}
		_ = json.Unmarshal([]byte(h["history"]), &st.History)
		_ = json.Unmarshal([]byte(h["flush"]), &st.Flush)
		out = append(out, st)
	}
	return out, nil
}
