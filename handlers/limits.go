package handlers

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Per-socket event limits (CONTRACT §1, Limits). Every event of a socket,
// whichever path it takes (direct.go or the library's queue, and unknown
// events too), takes a token from its class's bucket before any work; an
// event that finds the bucket empty is acked rate_limited and does nothing.

// Limit is a token bucket: Rate events per second sustained, up to Burst at
// once. The zero value means the class's documented default; a Rate of
// +Inf (NoLimit) lifts the limit.
type Limit struct {
	Rate  float64
	Burst int
}

// NoLimit is a Limit that never refuses (load tests).
var NoLimit = Limit{Rate: math.Inf(1)}

// Unlimited reports whether l lifts its limit.
func (l Limit) Unlimited() bool { return math.IsInf(l.Rate, 1) }

func (l Limit) String() string {
	if l.Unlimited() {
		return "unlimited"
	}
	return fmt.Sprintf("%g/s burst %d", l.Rate, l.Burst)
}

func (l Limit) or(def Limit) Limit {
	if l.Rate == 0 && l.Burst == 0 {
		return def
	}
	if l.Unlimited() {
		return NoLimit
	}
	if l.Rate <= 0 {
		l.Rate = def.Rate
	}
	if l.Burst <= 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
	return l
}

// EventLimits are the per-socket limits of each class of events.
type EventLimits struct {
	Typing    Limit // typing:start and typing:stop: default 5/s, burst 10
	Join      Limit // conversation:join and conversation:leave together: 20/s, burst 200
	Query     Limit // presence:query and presence:subscribe together: 5/s, burst 10
	State     Limit // state:set: 30/s, burst 60 (its broadcasts are coalesced to StateInterval)
	Heartbeat Limit // heartbeat: 10/s, burst 20
	Other     Limit // any other event, unknown ones included: 20/s, burst 50
}

func (l EventLimits) withDefaults() EventLimits {
	l.Typing = l.Typing.or(Limit{5, 10})
	l.Join = l.Join.or(Limit{20, 200})
	l.Query = l.Query.or(Limit{5, 10})
	l.State = l.State.or(Limit{30, 60})
	l.Heartbeat = l.Heartbeat.or(Limit{10, 20})
	l.Other = l.Other.or(Limit{20, 50})
	return l
}

// limitClass is an index into a socket's buckets.
type limitClass uint8

const (
	classOther limitClass = iota
	classTyping
	classJoin
	classQuery
	classState
	classHeartbeat
	numClasses
)

// classOf is the class of a known event.
func classOf(event string) limitClass {
	switch event {
	case "typing:start", "typing:stop":
		return classTyping
	case "conversation:join", "conversation:leave":
		return classJoin
	case "presence:query", "presence:subscribe":
		return classQuery
	case "state:set":
		return classState
	case "heartbeat":
		return classHeartbeat
	}
	return classOther
}

// limitTable is the resolved limit of each class.
type limitTable [numClasses]Limit

func (l EventLimits) table() limitTable {
	l = l.withDefaults()
	var t limitTable
	t[classOther], t[classTyping], t[classJoin] = l.Other, l.Typing, l.Join
	t[classQuery], t[classState], t[classHeartbeat] = l.Query, l.State, l.Heartbeat
	return t
}

// limitEpoch is the origin of bucket times: durations since it are
// monotonic and cost no allocation.
var limitEpoch = time.Now()

// bucket is one class's tokens on one socket.
type bucket struct {
	tokens float64
	at     time.Duration // since limitEpoch, when tokens was computed
	used   bool          // false: full
}

// take takes one token at now, reporting false when there is none.
func (b *bucket) take(l Limit, now time.Duration) bool {
	if !b.used {
		b.used, b.tokens, b.at = true, float64(l.Burst), now
	} else if now > b.at {
		b.tokens = min(float64(l.Burst), b.tokens+(now-b.at).Seconds()*l.Rate)
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// socketLimits are one socket's buckets.
type socketLimits struct {
	mu      sync.Mutex
	buckets [numClasses]bucket
}

// allow takes a token of class at now (the event's arrival at the handler).
func (h *Sockets) allow(c *Conn, class limitClass, now time.Time) bool {
	l := h.limits[class]
	if l.Unlimited() {
		return true
	}
	d := now.Sub(limitEpoch)
	c.limits.mu.Lock()
	ok := c.limits.buckets[class].take(l, d)
	c.limits.mu.Unlock()
	return ok
}

// rateLimited is the error of an event over its limit.
func rateLimited(l Limit) *Error {
	return errorf(CodeRateLimited, "too many events of this kind (at most %s); slow down", l)
}
