package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// fake is a ReadFunc that answers "v:<id>" for ids not starting with "x",
// records each read, and can hold reads until released.
type fake struct {
	mu      sync.Mutex
	reads   [][]string
	ctxs    []context.Context
	hold    chan struct{} // non-nil: reads wait for it to close
	started chan struct{} // one send per read started
	fail    error
}

func newFake() *fake { return &fake{started: make(chan struct{}, 100)} }

func (f *fake) read(ctx context.Context, ids []string) (map[string]string, error) {
	f.mu.Lock()
	f.reads = append(f.reads, slices.Clone(ids))
	f.ctxs = append(f.ctxs, ctx)
	hold, fail := f.hold, f.fail
	f.mu.Unlock()
	f.started <- struct{}{}
	if hold != nil {
		<-hold
	}
	if fail != nil {
		return nil, fail
	}
	out := map[string]string{}
	for _, id := range ids {
		if !strings.HasPrefix(id, "x") {
			out[id] = "v:" + id
		}
	}
	return out, nil
}

func (f *fake) readsDone() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reads)
}

// waitPending waits until the pending batch holds n ids.
func waitPending[V any](t *testing.T, r *Reader[V], n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := 0
		if r.next != nil {
			got = len(r.next.ids)
		}
		r.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending batch holds %d ids, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitIdle waits until no read runs and none is pending.
func waitIdle[V any](t *testing.T, r *Reader[V]) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		running, pending := r.running, r.next != nil
		r.mu.Unlock()
		if running == 0 && !pending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads running, pending batch %v", running, pending)
		}
		time.Sleep(time.Millisecond)
	}
}

// busy returns a Reader with one reader, over a fake whose reads wait
// for f.hold, once its reader is taken by a read of "first"; that read's
// error arrives on first when f.hold is closed.
func busy(t *testing.T, chunk int) (f *fake, r *Reader[string], first chan error) {
	f = newFake()
	f.hold = make(chan struct{})
	r = New(f.read, 1, chunk, time.Second)
	first = make(chan error, 1)
	go func() {
		_, err := r.Get(t.Context(), []string{"first"})
		first <- err
	}()
	<-f.started // the only reader is busy
	return f, r, first
}

type key struct{}

func TestLoneCallerReadsAtOnceUnderItsContext(t *testing.T) {
	f := newFake()
	r := New(f.read, 2, 100, time.Second)
	ctx := context.WithValue(t.Context(), key{}, "mine")
	got, err := r.Get(ctx, []string{"a", "x1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["a"] != "v:a" {
		t.Fatalf("got %v, want only a", got)
	}
	if f.ctxs[0].Value(key{}) != "mine" {
		t.Fatal("a direct read does not run under the caller's context")
	}
	if got, err := r.Get(ctx, nil); err != nil || len(got) != 0 || got == nil {
		t.Fatalf("no ids: got %v, %v; want an empty map", got, err)
	}
	if len(f.readsDone()) != 1 {
		t.Fatalf("reads %v: asking for no ids must not read", f.readsDone())
	}
}

func TestBurstSharesOneRead(t *testing.T) {
	f, r, first := busy(t, 100)

	type result struct {
		i   int
		got map[string]string
		err error
	}
	results := make(chan result, 10)
	for i := range 10 {
		go func() {
			// each asks for its own id, one shared id and one unknown id
			got, err := r.Get(t.Context(), []string{fmt.Sprint("u", i), "shared", fmt.Sprint("x", i)})
			results <- result{i, got, err}
		}()
	}
	waitPending(t, r, 21)
	close(f.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 10 {
		res := <-results
		if res.err != nil {
			t.Fatal(res.err)
		}
		own := fmt.Sprint("u", res.i)
		if len(res.got) != 2 || res.got[own] != "v:"+own || res.got["shared"] != "v:shared" {
			t.Fatalf("caller %d got %v: want its own id and the shared one only", res.i, res.got)
		}
	}
	reads := f.readsDone()
	if len(reads) != 2 {
		t.Fatalf("%d reads %v, want 2 (the first, then one for the burst)", len(reads), reads)
	}
	if len(reads[1]) != 21 || !slices.IsSorted(reads[1]) {
		t.Fatalf("batch read %v: want the 21 distinct ids, sorted", reads[1])
	}
	waitIdle(t, r)
}

func TestBatchSplitIntoChunks(t *testing.T) {
	f, r, _ := busy(t, 3)
	done := make(chan map[string]string, 1)
	go func() {
		got, _ := r.Get(t.Context(), []string{"a", "b", "c", "d", "e", "f", "g"})
		done <- got
	}()
	waitPending(t, r, 7)
	close(f.hold)
	if got := <-done; len(got) != 7 {
		t.Fatalf("got %v, want 7 values", got)
	}
	var sizes []int
	for _, rd := range f.readsDone()[1:] {
		sizes = append(sizes, len(rd))
	}
	if !slices.Equal(sizes, []int{3, 3, 1}) {
		t.Fatalf("batch read in chunks of %v, want [3 3 1]", sizes)
	}

	// a lone caller's read is split the same way
	waitIdle(t, r)
	before := len(f.readsDone())
	if got, err := r.Get(t.Context(), []string{"h", "i", "j", "k"}); err != nil || len(got) != 4 {
		t.Fatalf("direct read: %v, %v", got, err)
	}
	sizes = nil
	for _, rd := range f.readsDone()[before:] {
		sizes = append(sizes, len(rd))
	}
	if !slices.Equal(sizes, []int{3, 1}) {
		t.Fatalf("direct read in chunks of %v, want [3 1]", sizes)
	}
}

func TestBatchErrorReachesItsCallers(t *testing.T) {
	f, r, first := busy(t, 100)
	boom := errors.New("boom")
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := r.Get(t.Context(), []string{fmt.Sprint("u", i)})
			errs <- err
		}()
	}
	waitPending(t, r, 3)
	f.mu.Lock()
	f.fail = boom // the batch read fails; the first read already started
	f.mu.Unlock()
	close(f.hold)
	<-first
	for range 3 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Fatalf("err = %v, want the batch's error", err)
		}
	}
	// the reader is free again and reads afresh
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	if got, err := r.Get(t.Context(), []string{"again"}); err != nil || got["again"] != "v:again" {
		t.Fatalf("after a failed batch: %v, %v", got, err)
	}
}

func TestCallerGivesUpBatchGoesOn(t *testing.T) {
	f, r, first := busy(t, 100)
	defer func() { <-first }()

	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "quitter"))
	gaveUp := make(chan error, 1)
	go func() {
		_, err := r.Get(ctx, []string{"quitter"})
		gaveUp <- err
	}()
	stayed := make(chan map[string]string, 1)
	go func() {
		got, _ := r.Get(t.Context(), []string{"stayer"})
		stayed <- got
	}()
	waitPending(t, r, 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	close(f.hold)
	if got := <-stayed; got["stayer"] != "v:stayer" {
		t.Fatalf("the other caller got %v", got)
	}
	// the batch read its own context, not the quitter's
	reads := f.readsDone()
	f.mu.Lock()
	bctx := f.ctxs[1]
	f.mu.Unlock()
	if len(reads) != 2 || bctx.Value(key{}) != nil {
		t.Fatalf("reads %v: want the batch read once, under a context of its own", reads)
	}
	if _, ok := bctx.Deadline(); !ok {
		t.Fatal("a batch's read has no deadline")
	}
}
