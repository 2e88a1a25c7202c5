package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/internal/redisfollow"
	"github.com/presenced/presenced/timestamp"
	"github.com/redis/go-redis/v9"
)

// StatusBus carries users' status changes to the nodes that have
// subscribers for them, and only to those: a node Watches the users its
// sockets subscribed to, so the fan-out grows with interest, not with the
// cluster or the rooms.
type StatusBus interface {
	// Publish announces a status change (an EventStatus).
	Publish(ctx context.Context, e Event) error
	// Watch and Unwatch change this node's interest; they are cheap and
	// counted by the caller (one Watch per user with local subscribers).
	Watch(userIDs ...string)
	Unwatch(userIDs ...string)
	// Run delivers the status changes of watched users until ctx ends.
	// deliver is called from the bus's reader: it must not wait (the
	// subscriptions queue the change and filter it elsewhere).
	Run(ctx context.Context, deliver func(context.Context, Event)) error
}

// LocalBus is the single-node StatusBus: a publish is delivered in process.
type LocalBus struct {
	mu      sync.RWMutex
	watched map[string]bool
	deliver func(context.Context, Event)
}

var _ StatusBus = (*LocalBus)(nil)

// NewLocalBus creates a LocalBus.
func NewLocalBus() *LocalBus { return &LocalBus{watched: map[string]bool{}} }

// Publish implements StatusBus.
func (b *LocalBus) Publish(ctx context.Context, e Event) error {
	b.mu.RLock()
	d, ok := b.deliver, b.watched[e.UserID]
	b.mu.RUnlock()
	if ok && d != nil {
		d(ctx, e)
	}
	return nil
}

// Watch implements StatusBus.
func (b *LocalBus) Watch(ids ...string) {
	b.mu.Lock()
	for _, id := range ids {
		b.watched[id] = true
	}
	b.mu.Unlock()
}

// Unwatch implements StatusBus.
func (b *LocalBus) Unwatch(ids ...string) {
	b.mu.Lock()
	for _, id := range ids {
		delete(b.watched, id)
	}
	b.mu.Unlock()
}

// Run implements StatusBus.
func (b *LocalBus) Run(ctx context.Context, deliver func(context.Context, Event)) error {
	b.mu.Lock()
	b.deliver = deliver
	b.mu.Unlock()
	<-ctx.Done()
	return nil
}

// RedisBus publishes each status change on the user's own channel
// (<prefix>:status:<user>) and subscribes to the channels of watched users.
type RedisBus struct {
	rdb    redis.UniversalClient
	prefix string
	log    *slog.Logger

	mu      sync.Mutex
	watched map[string]bool
	changes chan struct{}

	// through Sentinel: the master moved (Run subscribes again)
	follow *redisfollow.Follower
	moved  chan struct{}

	retryMu sync.Mutex
	retry   map[string]Event // user → the latest change whose publish failed (Run retries it)
}

const (
	retryEvery   = time.Second            // how often Run publishes the failed changes again
	retryFor     = 2 * time.Minute        // a failed change older than this is dropped
	retryMaxKept = 100000                 // failed changes kept at most (users)
	retryWait    = 200 * time.Millisecond // each retry's publish at most
)

var _ StatusBus = (*RedisBus)(nil)

// NewRedisBus creates a RedisBus.
func NewRedisBus(rdb redis.UniversalClient, prefix string, log *slog.Logger) *RedisBus {
	if prefix == "" {
		prefix = "presence"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &RedisBus{rdb: rdb, prefix: prefix, log: log, watched: map[string]bool{}, changes: make(chan struct{}, 1), moved: make(chan struct{}, 1),
		retry: map[string]Event{}}
	b.follow = redisfollow.New(rdb, func() {
		select {
		case b.moved <- struct{}{}:
		default:
		}
	})
	return b
}

func (b *RedisBus) channel(user string) string { return b.prefix + ":status:" + user }

// statusMsg is the wire form of a status change.
type statusMsg struct {
	UserID   string `json:"u"`
	Status   Status `json:"s"`
	At       int64  `json:"at"`
	LastSeen int64  `json:"ls,omitempty"`
}

// Publish implements StatusBus. A change whose publish fails is published
// again by Run, every retryEvery for up to retryFor, unless a later change
// of the user's goes out first: until 2026-12-07 it was lost, and the
// user's subscribers showed the status before it for good (a black-box
// audit: a user shown offline though back online, after a Redis restart).
func (b *RedisBus) Publish(ctx context.Context, e Event) error {
	b.retryMu.Lock()
	if old, had := b.retry[e.UserID]; had {
		// a failed change of the user's waits: this one goes out in
		// order with its retries (which hold retryMu while publishing)
		defer b.retryMu.Unlock()
		err := b.publish(ctx, e)
		switch {
		case e.At.Before(old.At):
			// an older change, late: the one kept stands
		case err != nil:
			b.retry[e.UserID] = e
		default:
			delete(b.retry, e.UserID) // published: the failed one is out of date
		}
		return err
	}
	b.retryMu.Unlock()
	err := b.publish(ctx, e)
	if err != nil {
		b.retryMu.Lock()
		old, had := b.retry[e.UserID]
		if (!had && len(b.retry) < retryMaxKept) || (had && !e.At.Before(old.At)) {
			b.retry[e.UserID] = e
		}
		b.retryMu.Unlock()
	}
	return err
}

// retryFailed publishes the failed changes again (Run, every retryEvery),
// each while holding retryMu, within retryWait, so that a change of the
// same user's published meanwhile goes out after it; it stops at the
// first that fails.
func (b *RedisBus) retryFailed(ctx context.Context, now time.Time) {
	b.retryMu.Lock()
	todo := make([]Event, 0, len(b.retry))
	for u, e := range b.retry {
		if now.Sub(e.At) > retryFor {
			delete(b.retry, u)
			b.log.Warn("status change dropped after retrying it", "user_id", u, "status", string(e.Status))
			continue
		}
		todo = append(todo, e)
	}
	b.retryMu.Unlock()
	for _, e := range todo {
		b.retryMu.Lock()
		if cur, ok := b.retry[e.UserID]; !ok || cur != e {
			b.retryMu.Unlock()
			continue // a later change went out, or failed and is kept
		}
		pctx, cancel := context.WithTimeout(ctx, retryWait)
		err := b.publish(pctx, e)
		cancel()
		if err == nil {
			delete(b.retry, e.UserID)
		}
		b.retryMu.Unlock()
		if err != nil {
			return // still failing: the next round
		}
	}
}

func (b *RedisBus) publish(ctx context.Context, e Event) error {
	m := statusMsg{UserID: e.UserID, Status: e.Status, At: timestamp.Millis(e.At)}
	if !e.LastSeen.IsZero() {
		m.LastSeen = timestamp.Millis(e.LastSeen)
	}
	payload, _ := json.Marshal(m)
	if err := b.rdb.Publish(ctx, b.channel(e.UserID), payload).Err(); err != nil {
		return unavailable("publish status", err)
	}
	return nil
}

// Watch implements StatusBus.
func (b *RedisBus) Watch(ids ...string) { b.change(ids, true) }

// Unwatch implements StatusBus.
func (b *RedisBus) Unwatch(ids ...string) { b.change(ids, false) }

func (b *RedisBus) change(ids []string, on bool) {
	b.mu.Lock()
	for _, id := range ids {
		if on {
			b.watched[id] = true
		} else {
			delete(b.watched, id)
		}
	}
	b.mu.Unlock()
	select {
	case b.changes <- struct{}{}:
	default:
	}
}

// Run implements StatusBus. It keeps one subscription connection whose
// channel set follows Watch/Unwatch; after a connection loss go-redis
// resubscribes by itself. Through Sentinel, the connection is replaced as
// soon as the master moved (redisfollow): it stayed on the demoted master,
// and status changes did not cross nodes until that one had become a
// replica and caught up (10-11 s after SENTINEL FAILOVER).
func (b *RedisBus) Run(ctx context.Context, deliver func(context.Context, Event)) error {
	go func() {
		t := time.NewTicker(retryEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.retryFailed(ctx, time.Now())
			}
		}
	}()
	sctx := b.follow.Context(ctx)
	ps := b.rdb.Subscribe(sctx)
	defer func() { ps.Close() }()
	msgs := ps.Channel(redis.WithChannelSize(1024))
	subscribed := map[string]bool{}
	failed := false
	resync := func() {
		failed = true
		b.mu.Lock()
		var add, del []string
		for id := range b.watched {
			if !subscribed[id] {
				add = append(add, b.channel(id))
			}
		}
		for id := range subscribed {
			if !b.watched[id] {
				del = append(del, b.channel(id))
			}
		}
		b.mu.Unlock()
		if len(add) > 0 {
			if err := ps.Subscribe(sctx, add...); err != nil {
				b.log.Warn("status subscribe failed; retrying", "err", err)
				return
			}
			for _, c := range add {
				subscribed[strings.TrimPrefix(c, b.prefix+":status:")] = true
			}
		}
		if len(del) > 0 {
			if err := ps.Unsubscribe(sctx, del...); err != nil {
				b.log.Warn("status unsubscribe failed; retrying", "err", err)
				return
			}
			for _, c := range del {
				delete(subscribed, strings.TrimPrefix(c, b.prefix+":status:"))
			}
		}
		failed = false
	}
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-b.changes:
			resync()
		case <-retry.C:
			if failed {
				resync()
			}
		case <-b.moved:
			if !b.follow.Moved() {
				continue
			}
			b.log.Info("the redis master moved: subscribing again to status changes")
			_ = ps.Close()
			ps = b.rdb.Subscribe(sctx)
			msgs = ps.Channel(redis.WithChannelSize(1024))
			clear(subscribed)
			resync()
		case m, ok := <-msgs:
			if !ok {
				return fmt.Errorf("presence: status subscription closed")
			}
			var sm statusMsg
			if err := json.Unmarshal([]byte(m.Payload), &sm); err != nil || sm.UserID == "" {
				b.log.Warn("bad status message dropped", "channel", m.Channel)
				continue
			}
			e := Event{Kind: EventStatus, UserID: sm.UserID, Status: sm.Status, At: timestamp.FromMillis(sm.At)}
			if sm.LastSeen > 0 {
				e.LastSeen = timestamp.FromMillis(sm.LastSeen)
			}
			deliver(ctx, e)
		}
	}
}
