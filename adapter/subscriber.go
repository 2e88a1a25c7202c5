package adapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redisfollow"
)

type subKind uint8

const (
	kindChannel subKind = iota // SUBSCRIBE
	kindPattern                // PSUBSCRIBE
	kindShard                  // SSUBSCRIBE
)

const (
	// A subscription that went silent (no message, no pong) for deadAfter
	// is dialed again. After a Sentinel failover (SENTINEL FAILOVER) the
	// nodes' subscriptions delivered nothing for 10.2 s, this bound then,
	// while publishing worked (failover audit); a PING a second costs
	// Redis nothing worth counting.
	pingInterval  = time.Second
	deadAfter     = 4 * time.Second
	echoWait      = 2 * time.Second
	dialBudget    = 5 * time.Second
	minRetryPause = 100 * time.Millisecond
	// maxRetryPause bounds the pause between attempts to subscribe again:
	// after a Redis Cluster master's death, its rooms' events do not cross
	// nodes until its replica took over and this node subscribed there, so
	// the pause adds to the outage (2 s until 2026-12-07, when its rooms
	// crossed nodes again 1.2-1.7 s after the takeover; 0.5-0.6 s now,
	// TestClusterMasterLostKeepsOtherShards). An attempt while Redis is
	// away costs a refused dial.
	maxRetryPause  = 500 * time.Millisecond
	unsubscribeTTL = 5 * time.Second
)

// subscriber keeps a set of subscriptions alive. Callers state what they
// want (want/unwant, never blocking); one goroutine reconciles that with
// Redis, and one goroutine per connection reads messages.
//
// It owns reconnection instead of relying on go-redis's: on any error of a
// connection (or 10s without traffic, pongs included) the connection is
// closed and replaced, and every wanted channel subscribed again, retrying
// with a growing pause while Redis is away. This matters for sharded Pub/Sub
// on Redis Cluster, where channels live on different nodes: go-redis would
// resubscribe all of a connection's shard channels in one SSUBSCRIBE, which a
// cluster node refuses (CROSSSLOT). Here, shard channels are routed to the
// master that owns their slot, one connection per master, and subscribed in
// one command per slot.
type subscriber struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // non-nil: route shard channels per node
	handle  func(*redis.Message)
	log     *slog.Logger
	obs     Observer
	// regained, if set, is called on a goroutine of its own with a wanted
	// channel whose subscription is confirmed again after it was lost:
	// what was published to it meanwhile never reached this subscriber.
	regained func(ch string)

	// probe is a channel of this subscriber's own (not on a Redis
	// Cluster): every health check publishes to it through the command
	// client, and a subscription that does not get it back within
	// echoWait is dialed again. A subscription can be alive and deliver
	// nothing published: after SENTINEL FAILOVER the demoted master
	// answered PINGs and kept the nodes' subscriptions for 10-11 s, while
	// the command client published to the new master, so no room event
	// crossed nodes and nothing said so (a second failover audit). On a
	// Redis Cluster a PUBLISH reaches every node, demoted or not; a dead
	// master's connections fail.
	probe   string
	pending atomic.Int64 // unix ns: a probe published and not back yet; 0: none

	mu        sync.Mutex
	want      map[string]subKind
	dirty     map[string]struct{} // channels added or removed since the last reconcile
	confirmed map[string]bool
	// lost holds the wanted channels whose connection failed since Redis
	// confirmed them, until they are confirmed again: unlike a channel
	// still being subscribed, their master is known to be out of reach
	lost map[string]bool
	// down holds the routes (masters, on a Redis Cluster) whose connection
	// failed (not for a slot that moved), or where a subscription failed,
	// until a connection there answers (a subscription, a pong): a channel
	// still being subscribed there is not reachable (routeDown)
	down map[string]bool
	kick chan struct{}

	// follow tells, through Sentinel, that the master moved (nil
	// otherwise): the subscriptions are dialed again at once. Before, they
	// stayed on the demoted master until the probe found them deaf, and
	// room events did not cross nodes for 3-4 s after the promotion.
	follow *redisfollow.Follower

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newSubscriber(ctx context.Context, client redis.UniversalClient, probe string, handle func(*redis.Message), regained func(string), log *slog.Logger, obs Observer) *subscriber {
	s := &subscriber{
		client:    client,
		handle:    handle,
		regained:  regained,
		log:       log,
		obs:       obs,
		want:      map[string]subKind{},
		dirty:     map[string]struct{}{},
		confirmed: map[string]bool{},
		lost:      map[string]bool{},
		down:      map[string]bool{},
		kick:      make(chan struct{}, 1),
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		s.cluster = cc
	} else if probe != "" {
		s.probe = probe
		s.want[probe] = kindChannel
		s.dirty[probe] = struct{}{}
	}
	s.follow = redisfollow.New(client, s.wake)
	s.ctx, s.cancel = context.WithCancel(s.follow.Context(ctx))
	s.wg.Add(1)
	go s.run()
	return s
}

// add asks for subscriptions; it does not wait for Redis.
func (s *subscriber) add(kind subKind, channels ...string) {
	s.mu.Lock()
	for _, ch := range channels {
		s.want[ch] = kind
		s.dirty[ch] = struct{}{}
	}
	s.mu.Unlock()
	s.wake()
}

// remove drops subscriptions; it does not wait for Redis.
func (s *subscriber) remove(channels ...string) {
	s.mu.Lock()
	for _, ch := range channels {
		delete(s.want, ch)
		delete(s.lost, ch)
		s.dirty[ch] = struct{}{}
	}
	s.mu.Unlock()
	s.wake()
}

func (s *subscriber) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// isSubscribed reports whether Redis confirmed the subscription to ch.
func (s *subscriber) isSubscribed(ch string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed[ch]
}

// routeUp clears route's down mark: a connection there answered.
func (s *subscriber) routeUp(route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.down, route)
}

// routeDown reports whether ch, not subscribed, is on a Redis Cluster
// master whose subscription connection failed since its last
// confirmation (or whose master the slot map cannot tell now). A room on
// a dead master joined (or joined again) after the death was taken for
// reachable until the subscriber's next round found it lost (a review,
// 2026-12-07).
func (s *subscriber) routeDown(ch string) bool {
	if s.cluster == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, 100*time.Millisecond) // (the slot map is loaded once the node runs)
	defer cancel()
	node, err := s.cluster.MasterForKey(ctx, ch)
	if err != nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down[node.Options().Addr]
}

// isLost reports whether the subscription to ch, wanted, was confirmed and
// then lost with its connection, and is not confirmed again yet.
func (s *subscriber) isLost(ch string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost[ch]
}

// close ends the subscriptions and waits for the goroutines.
func (s *subscriber) close() {
	s.cancel()
	s.wg.Wait()
}

// subConn is one Pub/Sub connection and its reader.
type subConn struct {
	s       *subscriber
	route   string
	ps      *redis.PubSub
	have    map[string]subKind // owned by the run goroutine
	failed  atomic.Bool
	moved   atomic.Bool // failed because Redis ended a subscription (a slot moved), not an outage
	closed  atomic.Bool
	seen    atomic.Int64 // unix nanoseconds of the last traffic
	waiting atomic.Bool  // the reader waits for Redis (not busy with a message)
	reader  bool
	done    chan struct{}

	mu      sync.Mutex
	leaving map[string]time.Time // unsubscriptions we asked for, not yet confirmed
}

func (s *subscriber) run() {
	defer s.wg.Done()
	conns := map[string]*subConn{}
	where := map[string]*subConn{}
	defer func() {
		for _, c := range conns {
			c.close()
		}
		s.mu.Lock()
		clear(s.confirmed)
		clear(s.lost)
		clear(s.down)
		s.mu.Unlock()
	}()

	health := time.NewTicker(pingInterval)
	defer health.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	pause := time.Duration(0)
	full := true    // compare everything, not only the channels changed
	reload := false // connections failed and were closed: reload the slot map

	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
			if pause != 0 {
				// A retry is due (retry): a failed connection or a new
				// channel waits for it. Acting on each kick would redial
				// at once, and each failure kicks again: with Redis
				// refusing connections, that spun a core dialing. A
				// failed connection is closed at once, though, so that
				// its channels count as lost, not confirmed, meanwhile.
				if closeFailed(conns, where) {
					reload = true
				}
				continue
			}
		case <-retry.C:
		case <-health.C:
			s.checkHealth(conns)
			s.checkEcho(conns)
		}
		if s.follow.Moved() {
			s.log.Info("the redis master moved: subscribing again")
			for _, c := range conns {
				c.fail(errors.New("the redis master moved"))
			}
		}

		// Replace failed connections; on a cluster, with the slot map
		// reloaded, since routing may have changed. The others keep their
		// subscriptions: a master's death closed every connection until
		// 2026-12-07, and the rooms on the masters still up lost their
		// cross-node events until its replica took over (6 s; failover
		// audit). A shard channel whose slot moves to another master is
		// unsubscribed by the server, and subscribed again where it went
		// (onSubscription).
		if closeFailed(conns, where) || reload {
			reload = false
			if s.cluster != nil {
				ctx, cancel := context.WithTimeout(s.ctx, dialBudget)
				s.cluster.ReloadState(ctx)
				cancel()
			}
			full = true
		}

		if err := s.reconcile(conns, where, full); err != nil {
			full = true
			if s.ctx.Err() != nil {
				return
			}
			if pause == 0 {
				pause = minRetryPause
				s.log.Warn("redis subscription failed, retrying", "err", err)
			} else {
				pause = min(2*pause, maxRetryPause)
			}
			retry.Reset(pause)
			continue
		}
		full = false
		if pause != 0 {
			s.log.Info("redis subscriptions restored")
			pause = 0
		}
	}
}

// closeFailed closes and forgets the failed connections (their channels
// lost) and reports whether there were any.
func closeFailed(conns map[string]*subConn, where map[string]*subConn) bool {
	closed := false
	for route, c := range conns {
		if !c.failed.Load() {
			continue
		}
		closed = true
		c.close()
		delete(conns, route)
		for ch, w := range where {
			if w == c {
				delete(where, ch)
			}
		}
	}
	return closed
}

// checkHealth pings every connection and fails those that went silent.
func (s *subscriber) checkHealth(conns map[string]*subConn) {
	for _, c := range conns {
		if c.failed.Load() || !c.reader {
			continue
		}
		// Silence counts only while the reader waits for Redis: a reader
		// busy delivering a message has simply not read the pongs yet.
		if c.waiting.Load() && time.Since(time.Unix(0, c.seen.Load())) > deadAfter {
			c.fail(errors.New("no traffic from redis"))
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, time.Second)
		err := c.ps.Ping(ctx)
		cancel()
		if err != nil {
			c.fail(err)
		} else {
			s.routeUp(c.route)
		}
	}
}

// checkEcho fails the connection that holds the probe's subscription if
// the last probe published has not come back within echoWait, and
// publishes the next one. A probe whose publish failed is not waited
// for: Redis is away, which the connections find by themselves.
func (s *subscriber) checkEcho(conns map[string]*subConn) {
	if s.probe == "" || !s.isSubscribed(s.probe) {
		s.pending.Store(0)
		return
	}
	if at := s.pending.Load(); at != 0 {
		if time.Since(time.Unix(0, at)) <= echoWait {
			return
		}
		s.pending.Store(0)
		for _, c := range conns {
			// (a reader busy delivering messages may have the probe
			// still in its backlog)
			if _, ok := c.have[s.probe]; ok && !c.failed.Load() && c.waiting.Load() {
				s.log.Warn("redis subscription gets nothing published (a server no longer the master?): subscribing again", "route", c.route, "waited", echoWait)
				c.fail(errors.New("probe not delivered"))
			}
		}
		return
	}
	sent := time.Now().UnixNano()
	s.pending.Store(sent) // before the publish: its echo may come before its reply
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	err := s.client.Publish(ctx, s.probe, "probe").Err()
	cancel()
	if err != nil {
		s.pending.CompareAndSwap(sent, 0)
	}
}

type subGroup struct {
	route string
	node  *redis.Client
	kind  subKind
	slot  int
}

// reconcile subscribes and unsubscribes so that Redis matches s.want: for
// every channel, or (full false) for those changed since the last call.
func (s *subscriber) reconcile(conns map[string]*subConn, where map[string]*subConn, full bool) error {
	s.mu.Lock()
	want := make(map[string]subKind, len(s.dirty))
	changed := make(map[string]struct{}, len(s.dirty))
	if full {
		for ch, k := range s.want {
			want[ch] = k
		}
		for ch := range where {
			changed[ch] = struct{}{}
		}
	} else {
		for ch := range s.dirty {
			changed[ch] = struct{}{}
			if k, ok := s.want[ch]; ok {
				want[ch] = k
			}
		}
	}
	clear(s.dirty)
	s.mu.Unlock()
	for ch := range want {
		changed[ch] = struct{}{}
	}

	ctx, cancel := context.WithTimeout(s.ctx, dialBudget)
	defer cancel()

	// Unsubscribe what is no longer wanted.
	for ch := range changed {
		c, ok := where[ch]
		if !ok {
			continue
		}
		if k, ok := want[ch]; ok && k == c.have[ch] {
			continue
		}
		kind := c.have[ch]
		delete(c.have, ch)
		delete(where, ch)
		s.setConfirmed(ch, false)
		if c.failed.Load() {
			continue
		}
		if err := c.unsubscribe(ctx, kind, ch); err != nil {
			c.fail(err)
		}
	}

	// Subscribe what is missing, one command per kind (and slot, on a cluster).
	// A group that fails marks its channels lost (isLost) and the others
	// go on: until 2026-12-07 the first failure ended the round, and a
	// healthy room's subscription could wait behind a dead master's for
	// several retries; and a channel whose subscription had never been
	// confirmed was not lost, so that a room on a dead master was taken
	// for reachable (a review).
	var firstErr error
	groups := map[subGroup][]string{}
	for ch, k := range want { // (want holds only the changed channels unless full)
		if _, ok := where[ch]; ok {
			continue
		}
		g := subGroup{kind: k, slot: -1}
		if s.cluster != nil && k == kindShard {
			node, err := s.cluster.MasterForKey(ctx, ch)
			if err != nil {
				s.markLost("", []string{ch}) // (no route: the slot map)
				firstErr = cmp.Or(firstErr, fmt.Errorf("route %s: %w", ch, err))
				continue
			}
			g.node = node
			g.route = node.Options().Addr
			g.slot = slotOf(ch)
		}
		groups[g] = append(groups[g], ch)
	}
	for g, chans := range groups {
		c := conns[g.route]
		if c == nil {
			c = s.newConn(ctx, g)
			conns[g.route] = c
		}
		if c.failed.Load() {
			s.markLost(g.route, chans)
			continue
		}
		if err := c.subscribe(ctx, g.kind, chans); err != nil {
			c.fail(err)
			s.markLost(g.route, chans)
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		s.routeUp(g.route)
		for _, ch := range chans {
			c.have[ch] = g.kind
			where[ch] = c
		}
		if !c.reader {
			c.reader = true
			c.seen.Store(time.Now().UnixNano())
			s.wg.Add(1)
			go c.read()
		}
	}
	if firstErr != nil {
		return firstErr
	}
	for _, c := range conns {
		if c.failed.Load() {
			return errors.New("redis subscription connection failed")
		}
	}
	return nil
}

// markLost marks the wanted channels of chans that are not confirmed as
// lost, and their route down: their subscription failed.
func (s *subscriber) markLost(route string, chans []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if route != "" {
		s.down[route] = true
	}
	for _, ch := range chans {
		if _, wanted := s.want[ch]; wanted && !s.confirmed[ch] {
			s.lost[ch] = true
		}
	}
}

func (s *subscriber) newConn(ctx context.Context, g subGroup) *subConn {
	c := &subConn{s: s, route: g.route, have: map[string]subKind{}, done: make(chan struct{}), leaving: map[string]time.Time{}}
	if g.node != nil {
		c.ps = g.node.Subscribe(ctx)
	} else {
		c.ps = s.client.Subscribe(ctx)
	}
	return c
}

func (s *subscriber) setConfirmed(ch string, ok bool) {
	s.mu.Lock()
	regained := false
	if ok {
		s.confirmed[ch] = true
		regained = s.lost[ch]
		delete(s.lost, ch)
	} else {
		delete(s.confirmed, ch)
	}
	s.mu.Unlock()
	if regained && s.regained != nil {
		go s.regained(ch)
	}
}

func (c *subConn) subscribe(ctx context.Context, kind subKind, chans []string) error {
	switch kind {
	case kindPattern:
		return c.ps.PSubscribe(ctx, chans...)
	case kindShard:
		return c.ps.SSubscribe(ctx, chans...)
	default:
		return c.ps.Subscribe(ctx, chans...)
	}
}

func (c *subConn) unsubscribe(ctx context.Context, kind subKind, ch string) error {
	c.mu.Lock()
	c.leaving[ch] = time.Now()
	c.mu.Unlock()
	switch kind {
	case kindPattern:
		return c.ps.PUnsubscribe(ctx, ch)
	case kindShard:
		return c.ps.SUnsubscribe(ctx, ch)
	default:
		return c.ps.Unsubscribe(ctx, ch)
	}
}

func (c *subConn) fail(err error) {
	if c.closed.Load() {
		return
	}
	if c.failed.CompareAndSwap(false, true) {
		c.s.log.Debug("redis subscription connection lost", "err", err, "route", c.route)
		c.s.wake()
	}
}

func (c *subConn) close() {
	c.closed.Store(true)
	c.failed.Store(true)
	_ = c.ps.Close()
	if c.reader {
		<-c.done
	}
	c.s.mu.Lock()
	if c.route != "" && !c.moved.Load() && c.s.ctx.Err() == nil {
		c.s.down[c.route] = true
	}
	for ch := range c.have {
		if c.s.confirmed[ch] {
			delete(c.s.confirmed, ch)
			if _, wanted := c.s.want[ch]; wanted {
				c.s.lost[ch] = true
			}
		}
	}
	c.s.mu.Unlock()
}

func (c *subConn) read() {
	defer c.s.wg.Done()
	defer close(c.done)
	for {
		c.waiting.Store(true)
		msg, err := c.ps.Receive(c.s.ctx)
		c.waiting.Store(false)
		if err != nil {
			if c.closed.Load() || c.s.ctx.Err() != nil {
				return
			}
			c.fail(err)
			return
		}
		c.seen.Store(time.Now().UnixNano())
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel == c.s.probe {
				c.s.pending.Store(0)
				continue
			}
			c.s.obs.Received()
			c.s.handle(m)
			c.seen.Store(time.Now().UnixNano())
		case *redis.Subscription:
			c.onSubscription(m)
		}
	}
}

func (c *subConn) onSubscription(m *redis.Subscription) {
	switch m.Kind {
	case "subscribe", "psubscribe", "ssubscribe":
		c.s.setConfirmed(m.Channel, true)
		c.s.routeUp(c.route)
	case "unsubscribe", "punsubscribe", "sunsubscribe":
		c.mu.Lock()
		_, asked := c.leaving[m.Channel]
		delete(c.leaving, m.Channel)
		for ch, at := range c.leaving {
			if time.Since(at) > unsubscribeTTL {
				delete(c.leaving, ch)
			}
		}
		c.mu.Unlock()
		if !asked {
			// Redis dropped the subscription itself (a slot moved to
			// another node): subscribe again, freshly routed.
			c.moved.Store(true)
			c.fail(fmt.Errorf("redis ended subscription to %s", m.Channel))
			return
		}
		c.s.setConfirmed(m.Channel, false)
	}
}

// slotOf is the Redis Cluster hash slot of key (CRC16/XMODEM of the key, or
// of its {hash tag}, modulo 16384).
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
