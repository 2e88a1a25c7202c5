package presence

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipes sends the engine's pipelines to Redis. A pipeline that finds a
// sender free goes at once, on its caller's goroutine: a lone operation
// waits for nothing but its round trip. While every sender is busy, the
// pipelines of other operations gather into the next batch, which the
// first sender free sends as one pipeline. So under a burst (a reconnect
// storm: thousands of connects and joins at once) the operations share a
// few large round trips instead of queueing one each on the connection
// pool, much as Node's Redis clients pipeline every command on one
// connection.
//
// Each operation's commands stay together and in order in one pipeline,
// on one connection, as they would in a pipeline of their own; operations
// running at the same time have no order between them either way. A
// caller whose context ends stops waiting; its commands may still run
// (as after a lost reply).
type pipes struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	queue   []*pipeBatch // gathered, waiting for a sender
	senders int          // batches being sent (at most maxSenders)
}

// pipeBatch is one pipeline to send: the commands of one or more
// operations, done closed once their replies are in.
type pipeBatch struct {
	cmds     []redis.Cmder
	first    context.Context // the first operation's context
	ops      int             // operations in the batch
	deadline time.Time       // the latest of the operations' deadlines
	done     chan struct{}
	err      error // a failure of the whole pipeline that no command carries (a hook's)
}

const (
	// maxSenders bounds the pipelines in flight at once. A few suffice:
	// each carries everything that gathered while the others were out.
	maxSenders = 4
	// maxBatchCmds bounds a batch's commands (a larger one is split), so
	// that one batch does not hold a Redis connection (and Redis) for long.
	maxBatchCmds = 2000
	// batchWait bounds a batch none of whose operations set a deadline.
	batchWait = 10 * time.Second
)

// abandonedError is the error of an operation that stopped waiting (its
// context ended) while its batch was still under way: its commands may be
// written yet and must not be read.
type abandonedError struct{ err error }

func (a abandonedError) Error() string { return a.err.Error() }
func (a abandonedError) Unwrap() error { return a.err }

// abandoned reports whether err is an abandonedError.
func abandoned(err error) bool {
	var a abandonedError
	return errors.As(err, &a)
}

// exec sends cmds (one operation's pipeline) and returns the first
// command's error, as redis.Pipeliner's Exec does, or an abandonedError.
func (p *pipes) exec(ctx context.Context, cmds []redis.Cmder) error {
	if len(cmds) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return abandonedError{err} // not sent: the commands hold no reply
	}
	p.mu.Lock()
	b := p.add(ctx, cmds)
	if p.senders < maxSenders {
		// A sender is free, so nothing else waits: the queue holds only
		// b, which this goroutine sends itself.
		p.senders++
		head := p.take()
		p.mu.Unlock()
		p.send(head)
		p.mu.Lock()
		if len(p.queue) > 0 {
			// More gathered meanwhile: a sender goroutine takes over, so
			// that this operation returns now.
			p.mu.Unlock()
			go p.sender()
		} else {
			p.senders--
			p.mu.Unlock()
		}
	} else {
		p.mu.Unlock()
	}
	select {
	case <-b.done: // (sent above, or by another)
	default:
		select {
		case <-b.done:
		case <-ctx.Done():
			return abandonedError{ctx.Err()}
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return b.err
}

// add puts cmds into the batch being gathered (a new one when there is
// none or it is full) and returns that batch. Called with mu held.
func (p *pipes) add(ctx context.Context, cmds []redis.Cmder) *pipeBatch {
	var b *pipeBatch
	if n := len(p.queue); n > 0 && len(p.queue[n-1].cmds)+len(cmds) <= maxBatchCmds {
		b = p.queue[n-1]
	} else {
		b = &pipeBatch{done: make(chan struct{})}
		p.queue = append(p.queue, b)
	}
	b.cmds = append(b.cmds, cmds...)
	if b.ops++; b.ops == 1 {
		b.first = ctx
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(batchWait)
	}
	if dl.After(b.deadline) {
		b.deadline = dl
	}
	return b
}

// take removes the oldest batch from the queue. Called with mu held and
// the queue not empty.
func (p *pipes) take() *pipeBatch {
	b := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	if len(p.queue) == 0 {
		p.queue = nil
	}
	return b
}

// sender sends batches until the queue is empty.
func (p *pipes) sender() {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.senders--
			p.mu.Unlock()
			return
		}
		b := p.take()
		p.mu.Unlock()
		p.send(b)
	}
}

// send sends one batch as one pipeline; each command gets its own reply
// or error. A batch of one operation goes under that operation's context
// (its values reach the client's hooks, and an operation given up before
// its turn is not sent); a batch of several under a context of its own
// that ends at their latest deadline.
func (p *pipes) send(b *pipeBatch) {
	defer close(b.done)
	ctx := b.first
	if b.ops > 1 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(context.Background(), b.deadline)
		defer cancel()
	}
	pipe := p.rdb.Pipeline()
	_ = pipe.BatchProcess(ctx, b.cmds...)
	if _, err := pipe.Exec(ctx); err != nil && !slices.ContainsFunc(b.cmds, func(c redis.Cmder) bool { return errors.Is(c.Err(), err) }) {
		b.err = err
	}
}
