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

// publisher sends messages in order, batched into pipelines, from one
// goroutine. Callers never wait for Redis: a message is queued (the queue is
// bounded) and its fate reported through done and the Observer. After a
// failure to reach Redis, publishes fail at once for a short, growing pause
// (a circuit breaker), so an outage costs no queueing and no waiting. A
// connection error opens the breaker at once; timeouts only when several
// batches in a row time out, since a slow moment is not an outage.
type publisher struct {
	client  redis.UniversalClient
	anchor  string // classic mode on a Redis Cluster: publish through the master of this key
	timeout time.Duration
	obs     Observer
	log     *slog.Logger

	ctx   context.Context
	queue chan outMsg
	wg    sync.WaitGroup
	down  atomic.Pointer[outage] // the breaker, for other goroutines to see

	// owned by the run goroutine
	pausedUntil time.Time
	pause       time.Duration
	timeouts    int
	lastErr     error
	failures    int
	lastLog     time.Time
}

func newPublisher(ctx context.Context, client redis.UniversalClient, cfg Config) *publisher {
	p := &publisher{
		client:  client,
		anchor:  cfg.Prefix,
		timeout: cfg.PublishTimeout,
		obs:     cfg.Observer,
		log:     cfg.Log,
		ctx:     ctx,
		queue:   make(chan outMsg, cfg.MaxPendingPublishes),
	}
	p.wg.Add(1)
	go p.run()
	return p
}

// outage is an open breaker: Redis failed, until until.
type outage struct {
	until time.Time
	err   error
}

// unavailable returns ErrRedisUnavailable (wrapping the cause) while the
// breaker is open, so that cluster requests fail at once too.
func (p *publisher) unavailable() error {
	if o := p.down.Load(); o != nil && time.Now().Before(o.until) {
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
	select {
	case p.queue <- m:
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

// wait returns once the publisher goroutine has ended (its context done).
func (p *publisher) wait() { p.wg.Wait() }

func (p *publisher) run() {
	defer p.wg.Done()
	defer func() {
		for {
			select {
			case m := <-p.queue:
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
		case m := <-p.queue:
			batch = append(batch[:0], m)
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case m := <-p.queue:
				batch = append(batch, m)
			default:
				break gather
			}
		}
		p.send(batch)
		clear(batch)
	}
}

func (p *publisher) send(batch []outMsg) {
	now := time.Now()
	if now.Before(p.pausedUntil) {
		err := fmt.Errorf("%w: %w", ErrRedisUnavailable, p.lastErr)
		for _, m := range batch {
			p.fail(m, err)
		}
		p.noteFailure(len(batch), p.lastErr)
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
			p.timeouts++
		} else {
			p.timeouts = breakerTimeouts
		}
	} else {
		p.timeouts = 0
	}
	switch {
	case p.timeouts >= breakerTimeouts:
		// Redis is unreachable, or too slow again and again: open the breaker.
		p.lastErr = netErr
		if p.pause == 0 {
			p.pause = minBreakerPause
		} else {
			p.pause = min(2*p.pause, maxBreakerPause)
		}
		p.pausedUntil = time.Now().Add(p.pause)
		p.down.Store(&outage{until: p.pausedUntil, err: netErr})
	default:
		p.pause = 0
		p.down.Store(nil)
	}
	if failed > 0 {
		p.noteFailure(failed, firstErr)
	} else if p.failures > 0 {
		p.log.Info("publishing to redis again", "failed_meanwhile", p.failures)
		p.failures = 0
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
	p.failures += n
	if time.Since(p.lastLog) >= logEvery {
		p.lastLog = time.Now()
		p.log.Warn("redis publish failed", "err", err, "failed", p.failures)
	}
}

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
