package presence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
)

// countHook counts the pipelines that reach the client and holds each for
// a moment, so that the senders are busy while the test's operations come.
type countHook struct {
	pipelines atomic.Int64
	hold      time.Duration
	fail      func(ctx context.Context) error // when it answers an error, the pipeline does not reach Redis
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		time.Sleep(h.hold)
		if h.fail != nil {
			if err := h.fail(ctx); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// Operations made while every sender is busy go together: 400 operations
// of three commands each, all at once, take far fewer pipelines than
// operations, and each gets its own replies, in its own order.
func TestPipesGatherOperations(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "pipes")
	hook := &countHook{hold: 20 * time.Millisecond}
	rdb.AddHook(hook)
	p := &pipes{rdb: rdb}
	const ops = 400
	var wg sync.WaitGroup
	errs := make(chan error, ops)
	for i := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := fmt.Sprintf("%s:k%d", prefix, i)
			pipe := rdb.Pipeline()
			pipe.Set(ctx, key, i, time.Minute)
			incr := pipe.Incr(ctx, key)
			get := pipe.Get(ctx, key)
			if err := p.exec(ctx, pipe.Cmds()); err != nil {
				errs <- err
				return
			}
			if n, _ := incr.Result(); n != int64(i+1) {
				errs <- fmt.Errorf("op %d: INCR answered %d", i, n)
			}
			if v, _ := get.Int(); v != i+1 {
				errs <- fmt.Errorf("op %d: GET answered %d", i, v)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := hook.pipelines.Load(); n > ops/4 {
		t.Fatalf("%d pipelines for %d operations made at once, want them gathered (at most %d)", n, ops, ops/4)
	}
	// the senders end once the queue is empty
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		senders, queued := p.senders, len(p.queue)
		p.mu.Unlock()
		if senders == 0 && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the burst: %d senders, %d batches queued", senders, queued)
		}
	}
}

// In a gathered batch, an operation gets its own commands' errors only; a
// failure of the whole pipeline reaches every operation in it; an
// operation whose context ends stops waiting, with an abandoned error, and
// its commands are not read.
func TestPipesErrorsPerOperation(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "pipes")
	type failKey struct{}
	hook := &countHook{hold: 30 * time.Millisecond, fail: func(ctx context.Context) error {
		if ctx.Value(failKey{}) != nil {
			return errors.New("injected pipeline failure")
		}
		return nil
	}}
	rdb.AddHook(hook)
	p := &pipes{rdb: rdb}
	ctx := context.Background()
	if err := rdb.Set(ctx, prefix+":str", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	// occupy keeps every sender busy (each holds its pipeline 30 ms)
	var busy sync.WaitGroup
	occupy := func() {
		for range maxSenders {
			busy.Add(1)
			go func() {
				defer busy.Done()
				pipe := rdb.Pipeline()
				pipe.Ping(ctx)
				_ = p.exec(ctx, pipe.Cmds())
			}()
		}
		time.Sleep(10 * time.Millisecond)
	}
	occupy() // so the next two operations share a batch
	var wg sync.WaitGroup
	var wrongErr, okErr error
	wg.Add(2)
	go func() { // INCR of a string: Redis answers an error for this operation only
		defer wg.Done()
		pipe := rdb.Pipeline()
		pipe.Incr(ctx, prefix+":str")
		wrongErr = p.exec(ctx, pipe.Cmds())
	}()
	go func() {
		defer wg.Done()
		pipe := rdb.Pipeline()
		pipe.Incr(ctx, prefix+":n")
		okErr = p.exec(ctx, pipe.Cmds())
	}()
	wg.Wait()
	busy.Wait()
	if wrongErr == nil || okErr != nil {
		t.Fatalf("the failing operation got %v, the other %v; want an error for the first only", wrongErr, okErr)
	}

	// a pipeline failure that no command carries (a hook's) reaches its operation
	pipe := rdb.Pipeline()
	pipe.Incr(ctx, prefix+":n")
	if err := p.exec(context.WithValue(ctx, failKey{}, true), pipe.Cmds()); err == nil || err.Error() != "injected pipeline failure" {
		t.Fatalf("a failed pipeline answered %v", err)
	}

	// an operation that gives up while its batch waits for a sender
	occupy()
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	pipe = rdb.Pipeline()
	pipe.Incr(ctx, prefix+":n")
	if err := p.exec(short, pipe.Cmds()); !abandoned(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an operation past its deadline answered %v, want an abandoned deadline error", err)
	}
	busy.Wait()
}
