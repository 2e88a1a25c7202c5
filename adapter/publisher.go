package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// outMsg is one message to publish.
type outMsg struct {
	channel string
	payload []byte
	sharded bool        // SPUBLISH instead of PUBLISH
	done    func(error) // optional; called once, from the publisher goroutine or the caller's
}

const (
	maxBatch        = 256
	minBreakerPause = 100 * time.Millisecond
	maxBreakerPause = time.Second
	breakerTimeouts = 2 // timed-out batches in a row that open the breaker
	logEvery        = 10 * time.Second
)

// publisher sends messages in order, batched into pipelines. Callers never
// wait for Redis: a message is queued (the queue is bounded) and its fate
// reported through done and the Observer. After a failure to reach Redis,
// publishes fail at once for a short, growing pause (a circuit breaker), so
// an outage costs no queueing and no waiting. A connection error opens the
// breaker at once; timeouts only when several batches in a row time out,
// since a slow moment is not an outage.
//
// Messages go through lanes, each with its queue, its goroutine and its
// breaker: one lane for everything, but in sharded mode on a Redis Cluster
// one per master, holding the messages whose channel's slot it served when
// the slot was first published to. A master that dies then holds up and
// fails its own rooms' messages alone: until 2026-12-07 one lane served
// every master, and while go-redis retried a dead master's part of a
// pipeline (until PublishTimeout) the other masters' messages waited
// behind it, and then failed in the breaker's pauses (a black-box audit;
// TestClusterMasterLostKeepsOtherShards). A slot keeps its lane for good,
// so that the messages of a channel stay in order through a failover (the
// lane's pipelines follow go-redis's slot map, not its first master); a
// router goroutine picks the lanes, so that a slot map still loading holds
// up the router, never the caller.
type publisher struct {
	client  redis.UniversalClient
	anchor  string // classic mode on a Redis Cluster: publish through the master of this key
	timeout time.Duration
	obs     Observer
	log     *slog.Logger
	depth   int // each lane's queue

	ctx context.Context
	wg  sync.WaitGroup
	one *lane // every message but sharded ones on a Redis Cluster
	// route takes sharded messages on a Redis Cluster to the router
	// (nil otherwise)
	route chan outMsg
	all   atomic.Pointer[[]*lane] // every lane, for unavailable

	// by hash slot, once published to: written by the router goroutine,
	// read by unavailableFor
	slotLane []atomic.Pointer[lane]
	byMaster map[string]*lane // by master address (the router's)

	logMu    sync.Mutex // the failure log's, shared by the lanes
	failures int
	lastLog  time.Time
	lastFail time.Time
}

// lane publishes its messages in order from one goroutine.
type lane struct {
	p     *publisher
	queue chan outMsg
	down  atomic.Pointer[outage] // the breaker, for other goroutines to see

	// owned by the lane's goroutine
	pausedUntil time.Time
	pause       time.Duration
	timeouts    int
	lastErr     error
}

func newPublisher(ctx context.Context, client redis.UniversalClient, cfg Config) *publisher {
	p := &publisher{
		client:  client,
		anchor:  cfg.Prefix,
		timeout: cfg.PublishTimeout,
		obs:     cfg.Observer,
		log:     cfg.Log,
		depth:   cfg.MaxPendingPublishes,
		ctx:     ctx,
	}
	p.one = p.newLane()
	if cc, ok := client.(*redis.ClusterClient); ok && cfg.Sharded {
		p.route = make(chan outMsg, cfg.MaxPendingPublishes)
		p.slotLane = make([]atomic.Pointer[lane], clusterSlots)
		p.byMaster = map[string]*lane{}
		p.wg.Add(1)
		go p.router(cc)
	}
	return p
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// newLane starts a lane (from newPublisher, or the router: wg's count is
// above zero then).
func (p *publisher) newLane() *lane {
	l := &lane{p: p, queue: make(chan outMsg, p.depth)}
	all := []*lane{l}
	if old := p.all.Load(); old != nil {
		all = append(all, *old...)
	}
	p.all.Store(&all)
	p.wg.Add(1)
	go l.run()
	return l
}

// router hands each sharded message to its slot's lane: the lane of the
// slot's master when the slot is first published to.
func (p *publisher) router(cc *redis.ClusterClient) {
	defer p.wg.Done()
	defer p.drain(p.route)
	for {
		var m outMsg
		select {
		case <-p.ctx.Done():
			return
		case m = <-p.route:
		}
		slot := slotOf(m.channel)
		l := p.slotLane[slot].Load()
		if l == nil {
			ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
			node, err := cc.MasterForKey(ctx, m.channel)
			cancel()
			if err != nil { // no slot map (Redis unreachable): not pinned yet
				err = fmt.Errorf("%w: %w", ErrRedisUnavailable, err)
				p.noteFailure(1, err)
				p.fail(m, err)
				continue
			}
			addr := node.Options().Addr
			if l = p.byMaster[addr]; l == nil {
				l = p.newLane()
				p.byMaster[addr] = l
			}
			p.slotLane[slot].Store(l)
		}
		select {
		case l.queue <- m:
		default:
			p.fail(m, ErrPublishQueueFull)
		}
	}
}

// outage is an open breaker: Redis failed, until until.
type outage struct {
	until time.Time
	err   error
}

// unavailable returns ErrRedisUnavailable (wrapping the cause) while a
// lane's breaker is open, so that cluster requests fail at once too. On a
// Redis Cluster in sharded mode one master's is enough: Reachable cannot
// tell which rooms it holds (ReachableRoom can, with unavailableFor).
func (p *publisher) unavailable() error {
	now := time.Now()
	for _, l := range *p.all.Load() {
		if err := l.unavailable(now); err != nil {
			return err
		}
	}
	return nil
}

// perMaster reports whether messages go through one lane per master (in
// sharded mode on a Redis Cluster).
func (p *publisher) perMaster() bool { return p.route != nil }

// unavailableFor is unavailable for the sharded messages on channel alone,
// where there is one lane per master: the breaker of the lane that serves
// channel's slot, or none if the slot has not been published to yet.
func (p *publisher) unavailableFor(channel string) error {
	if !p.perMaster() {
		return p.unavailable()
	}
	if l := p.slotLane[slotOf(channel)].Load(); l != nil {
		return l.unavailable(time.Now())
	}
	return nil
}

// unavailable returns ErrRedisUnavailable (wrapping the cause) while the
// lane's breaker is open.
func (l *lane) unavailable(now time.Time) error {
	if o := l.down.Load(); o != nil && now.Before(o.until) {
		return fmt.Errorf("%w: %w", ErrRedisUnavailable, o.err)
	}
	return nil
}

// publish queues m; it never blocks.
func (p *publisher) publish(m outMsg) {
	if p.ctx.Err() != nil {
		p.fail(m, ErrClosed)
		return
	}
	q := p.one.queue
	if p.perMaster() && m.sharded {
		q = p.route
	}
	select {
	case q <- m:
	default:
		p.fail(m, ErrPublishQueueFull)
	}
}

func (p *publisher) fail(m outMsg, err error) {
	p.obs.PublishFailed(m.channel, err)
	if m.done != nil {
		m.done(err)
	}
}

// drain fails what is left in q once its goroutine ends.
func (p *publisher) drain(q chan outMsg) {
	for {
		select {
		case m := <-q:
			p.fail(m, ErrClosed)
		default:
			return
		}
	}
}

// wait returns once the lanes' goroutines have ended (the context done).
func (p *publisher) wait() { p.wg.Wait() }

func (l *lane) run() {
	p := l.p
	defer p.wg.Done()
	defer p.drain(l.queue)
	batch := make([]outMsg, 0, maxBatch)
	for {
		select {
		case <-p.ctx.Done():
			return
		case m := <-l.queue:
			batch = append(batch[:0], m)
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case m := <-l.queue:
				batch = append(batch, m)
			default:
				break gather
			}
		}
		l.send(batch)
		clear(batch)
	}
}

func (l *lane) send(batch []outMsg) {
	p := l.p
	now := time.Now()
	if now.Before(l.pausedUntil) {
		err := fmt.Errorf("%w: %w", ErrRedisUnavailable, l.lastErr)
		for _, m := range batch {
			p.fail(m, err)
		}
		p.noteFailure(len(batch), l.lastErr)
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	pipe := p.pipeline(ctx, batch)
	cmds := make([]*redis.IntCmd, len(batch))
	for i, m := range batch {
		if m.sharded {
			cmds[i] = pipe.SPublish(ctx, m.channel, m.payload)
		} else {
			cmds[i] = pipe.Publish(ctx, m.channel, m.payload)
		}
	}
	_, _ = pipe.Exec(ctx)
	cancel()

	var netErr, firstErr error
	failed := 0
	for i, m := range batch {
		err := cmds[i].Err()
		if err == nil {
			p.obs.Published()
			if m.done != nil {
				m.done(nil)
			}
			continue
		}
		if p.ctx.Err() != nil {
			err = ErrClosed
		} else if !isRedisReply(err) && netErr == nil {
			netErr = err
		}
		if firstErr == nil {
			firstErr = err
		}
		failed++
		p.fail(m, err)
	}
	if netErr != nil && p.ctx.Err() == nil {
		if isTimeout(netErr) {
			l.timeouts++
		} else {
			l.timeouts = breakerTimeouts
		}
	} else {
		l.timeouts = 0
	}
	switch {
	case l.timeouts >= breakerTimeouts:
		// Redis is unreachable, or too slow again and again: open the breaker.
		l.lastErr = netErr
		if l.pause == 0 {
			l.pause = minBreakerPause
		} else {
			l.pause = min(2*l.pause, maxBreakerPause)
		}
		l.pausedUntil = time.Now().Add(l.pause)
		l.down.Store(&outage{until: l.pausedUntil, err: netErr})
	default:
		l.pause = 0
		l.down.Store(nil)
	}
	if failed > 0 {
		p.noteFailure(failed, firstErr)
	} else {
		p.noteSuccess()
	}
}

// pipeline returns where to send batch. On a Redis Cluster, classic
// messages all go through one master (any node relays PUBLISH to the whole
// cluster), so that they reach the other nodes in the order this node sent
// them: go-redis would spread them over the masters by channel name, and
// two messages relayed by different masters can overtake each other.
// Sharded messages go to the master of their channel's slot.
func (p *publisher) pipeline(ctx context.Context, batch []outMsg) redis.Pipeliner {
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok || batch[0].sharded {
		return p.client.Pipeline()
	}
	node, err := cc.MasterForKey(ctx, p.anchor)
	if err != nil {
		return p.client.Pipeline()
	}
	return node.Pipeline()
}

// noteFailure logs failures, at most once per logEvery.
func (p *publisher) noteFailure(n int, err error) {
	if p.ctx.Err() != nil {
		return
	}
	p.logMu.Lock()
	defer p.logMu.Unlock()
	p.failures += n
	p.lastFail = time.Now()
	if p.lastFail.Sub(p.lastLog) >= logEvery {
		p.lastLog = p.lastFail
		p.log.Warn("redis publish failed", "err", err, "failed", p.failures)
	}
}

// noteSuccess logs that publishes succeed again after failures, once
// recoverQuiet has passed without one: while one Redis Cluster master is
// down, its lane fails as the others succeed.
func (p *publisher) noteSuccess() {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if p.failures > 0 && time.Since(p.lastFail) >= recoverQuiet {
		p.log.Info("publishing to redis again", "failed_meanwhile", p.failures)
		p.failures = 0
	}
}

// recoverQuiet is how long publishes must go without a failure before
// their recovery is logged.
const recoverQuiet = 5 * time.Second

// isTimeout reports whether err is a deadline or an I/O timeout.
func isTimeout(err error) bool {
	var nerr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout())
}

// isRedisReply reports whether err is an error reply of Redis (the server
// answered), as opposed to a connection failure or a timeout.
func isRedisReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, context.DeadlineExceeded)
}
