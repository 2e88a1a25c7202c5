// Package coalesce merges concurrent keyed reads into few batched reads.
//
// A read of values by id (a database statement with an id list) costs
// about the same for one id as for a thousand, but a burst of callers
// each asking for a few ids queue one statement each on a connection
// pool. A Reader lets at most a few reads run at once; the callers that
// arrive meanwhile join one pending batch, which the first read to end
// sends as one read. A lone caller reads at once, on its own goroutine
// and under its own context, so an idle Reader adds no wait.
package coalesce

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// ReadFunc reads the values of ids (at most the Reader's chunk); ids
// without a value are absent from the map.
type ReadFunc[V any] func(ctx context.Context, ids []string) (map[string]V, error)

// Reader coalesces the calls to one ReadFunc. Create it with New.
type Reader[V any] struct {
	read    ReadFunc[V]
	readers int           // reads running at once, at most
	chunk   int           // ids per read of a batch, at most
	timeout time.Duration // bounds a batch's read (the callers only wait)

	mu      sync.Mutex
	running int       // reads running (direct and batches)
	next    *batch[V] // the ids asked for while every reader was busy
}

type batch[V any] struct {
	ids  map[string]struct{}
	done chan struct{} // closed when out and err are set
	out  map[string]V
	err  error
}

// New returns a Reader over read that runs at most readers reads at once
// and splits a read into calls of at most chunk ids; a batch's reads end
// within timeout.
func New[V any](read ReadFunc[V], readers, chunk int, timeout time.Duration) *Reader[V] {
	return &Reader[V]{read: read, readers: max(readers, 1), chunk: max(chunk, 1), timeout: timeout}
}

// Get returns the values of ids, as read once Get was called: by the
// caller itself when a reader is free, else by the batch it joins. ids
// must be valid for read (a batch's error is every member's error). When
// ctx ends before the batch is read, Get returns ctx's error and the batch
// goes on for the others.
func (r *Reader[V]) Get(ctx context.Context, ids []string) (map[string]V, error) {
	if len(ids) == 0 {
		return map[string]V{}, nil
	}
	r.mu.Lock()
	if r.running < r.readers {
		r.running++
		r.mu.Unlock()
		out, err := r.readAll(ctx, ids)
		r.done()
		return out, err
	}
	b := r.next
	if b == nil {
		b = &batch[V]{ids: make(map[string]struct{}, len(ids)), done: make(chan struct{})}
		r.next = b
	}
	for _, id := range ids {
		b.ids[id] = struct{}{}
	}
	r.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if b.err != nil {
		return nil, b.err
	}
	out := make(map[string]V, len(ids))
	for _, id := range ids {
		if v, ok := b.out[id]; ok {
			out[id] = v
		}
	}
	return out, nil
}

// done ends a read: its reader takes the pending batch, if any, else is
// free again.
func (r *Reader[V]) done() {
	r.mu.Lock()
	b := r.next
	r.next = nil
	if b == nil {
		r.running--
	}
	r.mu.Unlock()
	if b != nil {
		go r.readBatch(b)
	}
}

// readBatch reads b under its own timeout, hands the result to its
// callers, then ends like any read.
func (r *Reader[V]) readBatch(b *batch[V]) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	b.out, b.err = r.readAll(ctx, slices.Sorted(maps.Keys(b.ids)))
	cancel()
	close(b.done)
	r.done()
}

// readAll reads ids in calls of at most chunk ids.
func (r *Reader[V]) readAll(ctx context.Context, ids []string) (map[string]V, error) {
	if len(ids) <= r.chunk {
		return r.read(ctx, ids)
	}
	out := make(map[string]V, len(ids))
	for part := range slices.Chunk(ids, r.chunk) {
		got, err := r.read(ctx, part)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, got)
	}
	return out, nil
}
