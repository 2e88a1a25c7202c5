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
// one per master, holding the messages whose channel's slot it serves. A
// master that dies then holds up and fails its own rooms' messages alone:
// until 2026-12-07 one lane served every master, and while go-redis
// retried a dead master's part of a pipeline (until PublishTimeout) the
// other masters' messages waited behind it, and then failed in the
// breaker's pauses (a black-box audit; TestClusterMasterLostKeepsOtherShards).
type publisher struct {
	client  redis.UniversalClient
	anchor  string // classic mode on a Redis Cluster: publish through the master of this key
	timeout time.Duration
	obs     Observer
	log     *slog.Logger
	depth   int // each lane's queue

	ctx   context.Context
	wg    sync.WaitGroup
	one   *lane    // every message but sharded ones on a Redis Cluster
	lanes sync.Map // master address → *lane: sharded messages on a Redis Cluster
	// laneMu guards the making of lanes; closed once the context ended (no
	// lane is made after: wg's count is held above zero until then)
	laneMu sync.Mutex
	closed bool

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
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		<-ctx.Done()
		p.laneMu.Lock()
		p.closed = true
		p.laneMu.Unlock()
	}()
	return p
}

func (p *publisher) newLane() *lane {
	l := &lane{p: p, queue: make(chan outMsg, p.depth)}
	p.wg.Add(1)
	go l.run()
	return l
}

// laneOf is the lane of m: its channel's master's for a sharded message on
// a Redis Cluster (the one lane if the slot map names none yet).
func (p *publisher) laneOf(m outMsg) *lane {
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok || !m.sharded {
		return p.one
	}
	node, err := cc.MasterForKey(p.ctx, m.channel)
	if err != nil {
		return p.one
	}
	addr := node.Options().Addr
	if l, ok := p.lanes.Load(addr); ok {
		return l.(*lane)
	}
	p.laneMu.Lock()
	defer p.laneMu.Unlock()
	if l, ok := p.lanes.Load(addr); ok {
		return l.(*lane)
	}
	if p.closed {
		return p.one
	}
	l := p.newLane()
	p.lanes.Store(addr, l)
	return l
}

// outage is an open breaker: Redis failed, until until.
type outage struct {
	until time.Time
	err   error
}

// unavailable returns ErrRedisUnavailable (wrapping the cause) while a
// lane's breaker is open, so that cluster requests fail at once too. On a
// Redis Cluster in sharded mode one master's is enough: Reachable cannot
// tell which rooms it holds.
func (p *publisher) unavailable() error {
	now := time.Now()
	var err error
	check := func(l *lane) {
		if o := l.down.Load(); o != nil && now.Before(o.until) && err == nil {
			err = fmt.Errorf("%w: %w", ErrRedisUnavailable, o.err)
		}
	}
	check(p.one)
	p.lanes.Range(func(_, l any) bool {
		check(l.(*lane))
		return err == nil
	})
	return err
}

// publish queues m; it never blocks.
func (p *publisher) publish(m outMsg) {
	if p.ctx.Err() != nil {
		p.fail(m, ErrClosed)
		return
	}
	select {
	case p.laneOf(m).queue <- m:
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

// wait returns once the lanes' goroutines have ended (the context done).
func (p *publisher) wait() { p.wg.Wait() }

func (l *lane) run() {
	p := l.p
	defer p.wg.Done()
	defer func() {
		for {
			select {
			case m := <-l.queue:
				p.fail(m, ErrClosed)
			default:
				return
			}
		}
	}()
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
