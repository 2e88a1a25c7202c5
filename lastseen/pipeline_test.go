package lastseen_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// metric reads one sample of the pipeline's collectors: a counter or gauge
// value, or a histogram's sample count. labels are name, value pairs.
func metric(t *testing.T, p *lastseen.Pipeline, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range p.Collectors() {
		must(t, reg.Register(c))
	}
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return value(m)
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func wantMetric(t *testing.T, p *lastseen.Pipeline, want float64, name string, labels ...string) {
	t.Helper()
	if got := metric(t, p, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// Heartbeats every 25s for 35 minutes are 84 activity calls; with a 10m
// coarse interval 4 of them reach the buffer.
func TestCoarsening(t *testing.T) {
	ctx := t.Context()
	clk := newClock(t0)
	st := &wrapStore{Store: newFakeStore()}
	p := lastseen.NewPipeline(lastseen.NewMemory(), st, lastseen.Config{Now: clk.Now})
	calls := 0
	for at := t0; at.Before(t0.Add(35 * time.Minute)); at = at.Add(25 * time.Second) {
		must(t, p.Record(ctx, "u", at))
		calls++
	}
	if calls != 84 {
		t.Fatalf("%d calls", calls)
	}
	wantMetric(t, p, 4, "presenced_lastseen_records_total", "result", "buffered")
	wantMetric(t, p, 80, "presenced_lastseen_records_total", "result", "coarsened")
	// Nothing reaches the buffer before a push.
	wantGet(t, p.Buffer(), []string{"u"}, []time.Time{{}})
	must(t, p.Flush(ctx))
	if got := storedTimes(t, st, []string{"u"})["u"]; !got.Equal(t0.Add(30 * time.Minute)) {
		t.Fatalf("stored %v, want the record at +30m", got)
	}
	if s := p.Stats(); s.Statements != 1 || s.Rows != 1 {
		t.Fatalf("stats %+v, want one statement", s)
	}
	// An earlier time within the interval is coarsened too.
	must(t, p.Record(ctx, "u", t0))
	wantMetric(t, p, 81, "presenced_lastseen_records_total", "result", "coarsened")
}

// With DirectActivity (Redis) activity and the online statuses (not away
// ones) reach the store at the next flush without entering the buffer: a user
// the buffer holds has its time raised there, and no user is added.
// Offline times go through the buffer. A failed write keeps the records.
func TestDirectActivity(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		ctx := t.Context()
		clk := newClock(t0)
		st := &wrapStore{Store: newFakeStore()}
		buf := newBuffer(t)
		p := lastseen.NewPipeline(buf, st, lastseen.Config{Now: clk.Now, DirectActivity: true, FlushBatch: 2})
		must(t, p.RecordExact(ctx, "y", t0.Add(-time.Hour))) // y went offline an hour ago
		must(t, p.Flush(ctx))

		must(t, p.Record(ctx, "u", t0))
		must(t, p.Record(ctx, "y", t0))
		p.HandleEvents(ctx, []presence.Event{
			{Kind: presence.EventStatus, UserID: "v", Status: presence.Online, At: t0},
			{Kind: presence.EventStatus, UserID: "w", Status: presence.Away, At: t0},
			{Kind: presence.EventStatus, UserID: "x", Status: presence.Offline, At: t0.Add(2 * time.Second), LastSeen: t0.Add(time.Second)},
		})
		ids := []string{"u", "v", "w", "x", "y"}
		st.failNext.Store(1)
		if err := p.Flush(ctx); err == nil {
			t.Fatal("a flush whose activity write failed returned nil")
		}
		// the dirty users are written all the same: x
		if got := storedTimes(t, st, ids); len(got) != 2 || !got["y"].Equal(t0.Add(-time.Hour)) || !got["x"].Equal(t0.Add(time.Second)) {
			t.Fatalf("stored after the failed write %v, want y's earlier time and x's", got)
		}
		must(t, p.Flush(ctx))
		wantGet(t, buf, ids, []time.Time{{}, {}, {}, t0.Add(time.Second), t0})
		got := storedTimes(t, st, ids)
		for _, id := range []string{"u", "v", "y"} {
			if !got[id].Equal(t0) {
				t.Errorf("stored %s = %v, want %v", id, got[id], t0)
			}
		}
		if at, ok := got["w"]; ok {
			t.Errorf("stored w = %v for an away status, want nothing", at)
		}
		if !got["x"].Equal(t0.Add(time.Second)) {
			t.Errorf("stored x = %v, want its exact time", got["x"])
		}
		wantStats(t, buf, lastseen.BufferStats{Users: 2})
		// 1 (y's offline) + 1 failed + 1 (x) + 2 (three records, two a statement)
		if s := p.Stats(); s.Statements != 5 || s.Rows != 5 {
			t.Errorf("stats %+v, want 5 statements, 5 rows", s)
		}
	})
}

func TestInvalidUser(t *testing.T) {
	ctx := t.Context()
	st := newFakeStore()
	buf := lastseen.NewMemory()
	p := lastseen.NewPipeline(buf, st, lastseen.Config{})
	for _, id := range []string{"", "has space", string(make([]byte, 129))} {
		if err := p.Record(ctx, id, t0); !errors.Is(err, lastseen.ErrInvalidUser) {
			t.Errorf("Record(%q) = %v", id, err)
		}
		if err := p.RecordExact(ctx, id, t0); !errors.Is(err, lastseen.ErrInvalidUser) {
			t.Errorf("RecordExact(%q) = %v", id, err)
		}
	}
	// Another writer of a shared buffer put a bad id there: the flush drops
	// it instead of failing its batch forever.
	must(t, buf.Record(ctx, []store.LastSeen{{UserID: "bad id", At: t0}, {UserID: "good", At: t0}}))
	must(t, p.Flush(ctx))
	if got := storedTimes(t, st, []string{"good"}); !got["good"].Equal(t0) {
		t.Fatalf("stored %v", got)
	}
	wantStats(t, buf, lastseen.BufferStats{Users: 2})
}

// The reference scenario: a user active across several coarse intervals,
// flushed every 30s, then offline; the store ends with exactly the offline
// time, which a Reader then serves from the store through an empty buffer.
func TestReferenceScenario(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		stores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
			ctx := t.Context()
			clk := newClock(t0)
			buf := newBuffer(t)
			st := &wrapStore{Store: newStore(t)}
			p := lastseen.NewPipeline(buf, st, lastseen.Config{Now: clk.Now})

			var want time.Time
			heartbeats := 0
			for tick := time.Duration(0); tick < 35*time.Minute; tick += 5 * time.Second {
				at := clk.Advance(5 * time.Second)
				if tick%(25*time.Second) == 0 {
					must(t, p.Record(ctx, "alice", at))
					heartbeats++
					if want.IsZero() || at.Sub(want) >= 10*time.Minute {
						want = at
					}
				}
				if tick%(30*time.Second) == 0 {
					must(t, p.Flush(ctx))
					if got := storedTimes(t, st, []string{"alice"})["alice"]; !got.Equal(want) {
						t.Fatalf("at %v the store holds %v, want %v", tick, got, want)
					}
				}
			}
			if got := p.Stats().Statements; got != 4 {
				t.Fatalf("%d statements for %d heartbeats, want 4 (one per coarse interval)", got, heartbeats)
			}

			offline := clk.Advance(7456 * time.Millisecond)
			must(t, p.RecordExact(ctx, "alice", offline))
			wantGet(t, buf, []string{"alice"}, []time.Time{offline})
			must(t, p.Flush(ctx))
			if got := storedTimes(t, st, []string{"alice"})["alice"]; !got.Equal(offline) {
				t.Fatalf("store holds %v, want exactly the offline time %v", got, offline)
			}
			if got := p.Stats().Statements; got != 5 {
				t.Fatalf("%d statements, want 5", got)
			}
			wantStats(t, buf, lastseen.BufferStats{Users: 1})

			status := &fakeStatus{}
			clk.Advance(3 * time.Minute)
			read := func(buf lastseen.Buffer, viewer string) lastseen.Presence {
				t.Helper()
				r := lastseen.NewReader(lastseen.ReaderDeps{Status: status, Buffer: buf, Store: st, Now: clk.Now})
				p, err := r.Presence(ctx, viewer, "alice")
				must(t, err)
				return p
			}
			// Served from the buffer: no store read.
			st.resetCounts()
			if got := read(buf, "alice"); *got.LastSeen != timestamp.Format(offline) {
				t.Fatalf("self sees %s", js(got))
			}
			if n := st.lastSeen.Load(); n != 0 {
				t.Fatalf("%d store reads with a buffer hit", n)
			}
			// A new, empty buffer (Redis flushed, another prefix): served from
			// the store.
			empty := newBuffer(t)
			st.resetCounts()
			self := read(empty, "alice")
			other := read(empty, "bob")
			if st.lastSeen.Load() != 2 {
				t.Fatalf("%d store reads, want one per query", st.lastSeen.Load())
			}
			wantSelf := lastseen.Presence{UserID: "alice", Status: "offline", LastSeen: str("2026-11-30T11:35:07.579Z"), Display: "last seen 3 minutes ago"}
			wantOther := lastseen.Presence{UserID: "alice", Status: "offline", LastSeen: str("2026-11-30T11:35:00.000Z"), Display: "last seen 3 minutes ago"}
			if !presenceEqual(self, wantSelf) || !presenceEqual(other, wantOther) {
				t.Fatalf("self %s\nother %s", js(self), js(other))
			}
		})
	})
}

// Two nodes' flushers race over one dirty set while writers record:
// no stored or buffered time ever moves backwards, and the store ends with
// the latest time recorded for every user.
func TestRacingFlushers(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		stores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
			ctx := t.Context()
			buf := newBuffer(t)
			st := newStore(t)
			cfg := lastseen.Config{FlushBatch: 7}
			p1 := lastseen.NewPipeline(buf, st, cfg)
			p2 := lastseen.NewPipeline(buf, st, cfg)
			const users = 60
			ids := make([]string, users)
			for i := range ids {
				ids[i] = fmt.Sprintf("user%02d", i)
			}

			var (
				mu    sync.Mutex
				maxAt = map[string]time.Time{}
			)
			var writers, flushers sync.WaitGroup
			stop := make(chan struct{})
			for w := range 4 {
				writers.Go(func() {
					p := []*lastseen.Pipeline{p1, p2}[w%2]
					for i := range 300 {
						id := ids[rand.IntN(users)]
						if i < users/4 {
							id = ids[w*users/4+i] // every user gets at least one exact time
						}
						// Exact times after t0, coarse activity before: the
						// latest of every user is an exact time.
						at := t0.Add(time.Duration(rand.IntN(3_600_000)) * time.Millisecond)
						if err := p.RecordExact(ctx, id, at); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if at.After(maxAt[id]) {
							maxAt[id] = at
						}
						mu.Unlock()
						_ = p.Record(ctx, ids[rand.IntN(users)], t0.Add(-time.Duration(rand.IntN(3_600_000))*time.Millisecond))
					}
				})
			}
			for _, p := range []*lastseen.Pipeline{p1, p2} {
				flushers.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := p.Flush(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			// The monitor: each reading is at least the previous one.
			flushers.Go(func() {
				prevBuf := make([]time.Time, users)
				prevStore := map[string]time.Time{}
				for {
					select {
					case <-stop:
						return
					default:
					}
					got, err := buf.Get(ctx, ids)
					if err != nil {
						t.Error(err)
						return
					}
					stored, err := st.LastSeen(ctx, ids)
					if err != nil {
						t.Error(err)
						return
					}
					for i, id := range ids {
						if got[i].Before(prevBuf[i]) {
							t.Errorf("buffer moved backwards for %s: %v → %v", id, prevBuf[i], got[i])
						}
						if stored[id].Before(prevStore[id]) {
							t.Errorf("store moved backwards for %s: %v → %v", id, prevStore[id], stored[id])
						}
						prevBuf[i] = got[i]
						prevStore[id] = stored[id]
					}
				}
			})
			writers.Wait()
			close(stop)
			flushers.Wait()
			must(t, p1.Flush(ctx))
			must(t, p2.Flush(ctx))

			stored := storedTimes(t, st, ids)
			for _, id := range ids {
				want := maxAt[id].Truncate(time.Millisecond)
				if !stored[id].Equal(want) {
					t.Errorf("%s: stored %v, want the latest recorded %v", id, stored[id], want)
				}
			}
			s, err := buf.Stats(ctx)
			must(t, err)
			if s.Dirty != 0 || s.Claimed != 0 {
				t.Errorf("after the final flushes: %+v", s)
			}
			t.Logf("statements: node 1 %d, node 2 %d", p1.Stats().Statements, p2.Stats().Statements)
		})
	})
}

func exactUsers(t *testing.T, p *lastseen.Pipeline, n int, at time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%05d", i)
		must(t, p.RecordExact(t.Context(), ids[i], at.Add(time.Duration(i)*time.Millisecond)))
	}
	return ids
}

func wantAllStored(t *testing.T, st store.Store, ids []string, at time.Time) {
	t.Helper()
	stored := storedTimes(t, st, ids)
	for i, id := range ids {
		if want := at.Add(time.Duration(i) * time.Millisecond); !stored[id].Equal(want) {
			t.Fatalf("%s: stored %v, want %v (%d of %d stored)", id, stored[id], want, len(stored), len(ids))
		}
	}
}

// A store that fails N times, then recovers: every dirty user lands, none
// is lost by the failures (they go back to dirty, not into the void).
func TestStoreFailure(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		stores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
			t.Run("first batch fails 3 times", func(t *testing.T) {
				ctx := t.Context()
				buf := newBuffer(t)
				st := &wrapStore{Store: newStore(t)}
				p := lastseen.NewPipeline(buf, st, lastseen.Config{})
				ids := exactUsers(t, p, 2500, t0)
				st.failNext.Store(3)
				for i := range 3 {
					err := p.Flush(ctx)
					if !errors.Is(err, store.ErrUnavailable) {
						t.Fatalf("flush %d: %v, want the store's ErrUnavailable", i, err)
					}
					wantStats(t, buf, lastseen.BufferStats{Users: 2500, Dirty: 2500})
				}
				if got := len(storedTimes(t, st, ids)); got != 0 {
					t.Fatalf("%d stored while failing", got)
				}
				must(t, p.Flush(ctx))
				wantAllStored(t, st, ids, t0)
				wantStats(t, buf, lastseen.BufferStats{Users: 2500})
				if n := st.upserts.Load(); n != 6 {
					t.Fatalf("%d upserts, want 3 failed + 3 batches", n)
				}
				wantMetric(t, p, 3, "presenced_lastseen_flush_errors_total")
				wantMetric(t, p, 6, "presenced_lastseen_flush_statements_total")
				wantMetric(t, p, 2500, "presenced_lastseen_flush_rows_total")
				wantMetric(t, p, 3, "presenced_lastseen_flush_batch_rows")
			})
			t.Run("second batch fails", func(t *testing.T) {
				ctx := t.Context()
				buf := newBuffer(t)
				st := &wrapStore{Store: newStore(t), failOn: func(n int64) bool { return n == 2 }}
				p := lastseen.NewPipeline(buf, st, lastseen.Config{})
				ids := exactUsers(t, p, 2500, t0)
				if err := p.Flush(ctx); !errors.Is(err, errInjected) {
					t.Fatalf("flush: %v", err)
				}
				if got := len(storedTimes(t, st, ids)); got != 1000 {
					t.Fatalf("%d stored after the first batch, want 1000", got)
				}
				wantStats(t, buf, lastseen.BufferStats{Users: 2500, Dirty: 1500})
				wantMetric(t, p, 1500, "presenced_lastseen_dirty_users")
				must(t, p.Flush(ctx))
				wantAllStored(t, st, ids, t0)
				wantMetric(t, p, 0, "presenced_lastseen_dirty_users")
				wantMetric(t, p, 2500, "presenced_lastseen_buffer_users")
			})
			t.Run("Run backs off and recovers", func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				buf := newBuffer(t)
				st := &wrapStore{Store: newStore(t)}
				st.failNext.Store(5)
				p := lastseen.NewPipeline(buf, st, lastseen.Config{
					FlushInterval: 20 * time.Millisecond, PushInterval: 5 * time.Millisecond,
					RetryMin: 5 * time.Millisecond, RetryMax: 40 * time.Millisecond,
				})
				ids := exactUsers(t, p, 50, t0)
				done := make(chan error)
				go func() { done <- p.Run(ctx) }()
				deadline := time.Now().Add(10 * time.Second)
				for len(storedTimes(t, st, ids)) < len(ids) {
					if time.Now().After(deadline) {
						t.Fatalf("not all stored after 10s; %d upserts", st.upserts.Load())
					}
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Run = %v", err)
				}
				wantAllStored(t, st, ids, t0)
				if n := st.upserts.Load(); n < 6 {
					t.Fatalf("%d upserts, want 5 failures and a success", n)
				}
			})
		})
	})
}

// switchStore sends upserts to a broken store (a real one, closed) until
// switched back.
type switchStore struct {
	store.Store
	broken store.Store
	down   atomic.Bool
}

func (s *switchStore) UpsertLastSeen(ctx context.Context, b []store.LastSeen) error {
	if s.down.Load() {
		return s.broken.UpsertLastSeen(ctx, b)
	}
	return s.Store.UpsertLastSeen(ctx, b)
}

// The real PostgreSQL store failing (its pool closed) and coming back.
func TestPostgresDownThenUp(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		ctx := t.Context()
		live := pgStore(t)
		broken := pgStore(t)
		must(t, broken.Close())
		st := &switchStore{Store: live, broken: broken}
		st.down.Store(true)
		buf := newBuffer(t)
		p := lastseen.NewPipeline(buf, st, lastseen.Config{FlushBatch: 100})
		ids := exactUsers(t, p, 250, t0)
		for range 2 {
			if err := p.Flush(ctx); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("flush on a closed store: %v", err)
			}
		}
		wantStats(t, buf, lastseen.BufferStats{Users: 250, Dirty: 250})
		st.down.Store(false)
		must(t, p.Flush(ctx))
		wantAllStored(t, live, ids, t0)
		wantStats(t, buf, lastseen.BufferStats{Users: 250})
	})
}

// A flusher that claims and dies never acknowledges: its claims are made
// dirty again after ClaimTimeout by another node's flush, and land.
func TestCrashedFlusher(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		stores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
			ctx := t.Context()
			clk := newClock(t0.Add(time.Hour))
			buf := newBuffer(t)
			st := newStore(t)
			p := lastseen.NewPipeline(buf, st, lastseen.Config{Now: clk.Now, ClaimTimeout: 2 * time.Minute})
			ids := exactUsers(t, p, 30, t0)

			crashed, err := buf.Claim(ctx, 1000, clk.Now()) // and then nothing
			must(t, err)
			if len(crashed.Entries) != 30 {
				t.Fatalf("crashed flusher claimed %d", len(crashed.Entries))
			}
			must(t, p.Flush(ctx))
			if n := len(storedTimes(t, st, ids)); n != 0 {
				t.Fatalf("%d written while the claim is fresh", n)
			}
			clk.Advance(2 * time.Minute)
			must(t, p.Flush(ctx))
			if n := len(storedTimes(t, st, ids)); n != 0 {
				t.Fatalf("%d written at exactly the timeout", n)
			}
			clk.Advance(time.Millisecond)
			must(t, p.Flush(ctx))
			wantAllStored(t, st, ids, t0)
			wantStats(t, buf, lastseen.BufferStats{Users: 30})
			wantMetric(t, p, 30, "presenced_lastseen_requeued_total")
			// The dead flusher's late ack changes nothing.
			must(t, buf.Ack(ctx, crashed))
			wantStats(t, buf, lastseen.BufferStats{Users: 30})
		})
	})
}

// Graceful shutdown: what Run had not pushed or flushed yet is written by
// Flush after Run returns.
func TestFlushAtShutdown(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		ctx, cancel := context.WithCancel(t.Context())
		buf := newBuffer(t)
		st := newFakeStore()
		p := lastseen.NewPipeline(buf, st, lastseen.Config{FlushInterval: time.Hour, PushInterval: time.Hour})
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		var ids []string
		for i := range 20 {
			id := fmt.Sprintf("s%d", i)
			ids = append(ids, id)
			must(t, p.Record(ctx, id, t0))
		}
		must(t, p.RecordExact(ctx, "gone", t0.Add(time.Second)))
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		must(t, p.Flush(sctx))
		stored := storedTimes(t, st, append(ids, "gone"))
		if len(stored) != 21 || !stored["gone"].Equal(t0.Add(time.Second)) || !stored["s0"].Equal(t0) {
			t.Fatalf("stored %v", stored)
		}
	})
}

// flakyBuffer fails Record while failRecord is positive.
type flakyBuffer struct {
	lastseen.Buffer
	failRecord atomic.Int64
	gets       atomic.Int64
}

func (f *flakyBuffer) Record(ctx context.Context, e []store.LastSeen) error {
	if f.failRecord.Add(-1) >= 0 {
		return fmt.Errorf("flaky: %w", lastseen.ErrUnavailable)
	}
	return f.Buffer.Record(ctx, e)
}

func (f *flakyBuffer) Get(ctx context.Context, ids []string) ([]time.Time, error) {
	f.gets.Add(1)
	return f.Buffer.Get(ctx, ids)
}

// An exact record that cannot reach the buffer is kept and pushed later.
func TestRecordExactBufferDown(t *testing.T) {
	ctx := t.Context()
	buf := &flakyBuffer{Buffer: lastseen.NewMemory()}
	st := newFakeStore()
	p := lastseen.NewPipeline(buf, st, lastseen.Config{})
	buf.failRecord.Store(2)
	if err := p.RecordExact(ctx, "u", t0); !errors.Is(err, lastseen.ErrUnavailable) {
		t.Fatalf("RecordExact = %v", err)
	}
	must(t, p.Record(ctx, "v", t0))
	if err := p.Flush(ctx); !errors.Is(err, lastseen.ErrUnavailable) {
		t.Fatalf("flush with the buffer down = %v", err)
	}
	must(t, p.Flush(ctx))
	if got := storedTimes(t, st, []string{"u", "v"}); !got["u"].Equal(t0) || !got["v"].Equal(t0) {
		t.Fatalf("stored %v", got)
	}
}

// With DirectActivity too, an exact record that could not reach the
// buffer goes there at the next push, whatever the store does; a flush
// whose activity write fails still writes the dirty users.
func TestRecordExactBufferDownDirect(t *testing.T) {
	ctx := t.Context()
	buf := &flakyBuffer{Buffer: lastseen.NewMemory()}
	st := &wrapStore{Store: newFakeStore()}
	p := lastseen.NewPipeline(buf, st, lastseen.Config{DirectActivity: true})
	buf.failRecord.Store(1)
	if err := p.RecordExact(ctx, "u", t0); !errors.Is(err, lastseen.ErrUnavailable) {
		t.Fatalf("RecordExact = %v", err)
	}
	must(t, p.Record(ctx, "v", t0))
	st.failOn = func(call int64) bool { return call == 1 } // the activity write
	if err := p.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("flush with the activity write failing = %v", err)
	}
	// u reached the buffer at the flush's push and was written; v waits
	wantGet(t, buf, []string{"u", "v"}, []time.Time{t0, {}})
	if got := storedTimes(t, st, []string{"u", "v"}); len(got) != 1 || !got["u"].Equal(t0) {
		t.Fatalf("stored %v, want u alone", got)
	}
	must(t, p.Flush(ctx))
	if got := storedTimes(t, st, []string{"u", "v"}); !got["u"].Equal(t0) || !got["v"].Equal(t0) {
		t.Fatalf("stored %v", got)
	}
}

// raiseFailBuffer fails Raise while failRaise is positive.
type raiseFailBuffer struct {
	lastseen.Buffer
	failRaise atomic.Int64
}

func (f *raiseFailBuffer) Raise(ctx context.Context, e []store.LastSeen) error {
	if f.failRaise.Add(-1) >= 0 {
		return fmt.Errorf("raise: %w", lastseen.ErrUnavailable)
	}
	return f.Buffer.Raise(ctx, e)
}

// With DirectActivity, activity records whose Raise failed, or whose
// write failed after other batches of them were written, are all kept for
// the next flush.
func TestDirectActivityFailures(t *testing.T) {
	ctx := t.Context()
	buf := &raiseFailBuffer{Buffer: lastseen.NewMemory()}
	st := &wrapStore{Store: newFakeStore()}
	p := lastseen.NewPipeline(buf, st, lastseen.Config{DirectActivity: true, FlushBatch: 1})
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		must(t, p.Record(ctx, id, t0))
	}
	buf.failRaise.Store(1)
	if err := p.Flush(ctx); !errors.Is(err, lastseen.ErrUnavailable) {
		t.Fatalf("flush with Raise failing = %v", err)
	}
	if n := st.upserts.Load(); n != 0 {
		t.Fatalf("%d store writes after Raise failed, want none", n)
	}
	st.failOn = func(call int64) bool { return call == 2 } // the second of three batches
	if err := p.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("flush with a batch failing = %v", err)
	}
	if got := storedTimes(t, st, ids); len(got) != 1 {
		t.Fatalf("stored %v after the second batch failed, want the first batch alone", got)
	}
	must(t, p.Flush(ctx))
	if got := storedTimes(t, st, ids); len(got) != 3 {
		t.Fatalf("stored %v, want all three", got)
	}
}

// Retention forgets written times older than Retention, never dirty ones.
func TestRetention(t *testing.T) {
	buffers(t, func(t *testing.T, newBuffer func(t *testing.T) lastseen.Buffer) {
		ctx := t.Context()
		clk := newClock(t0)
		buf := newBuffer(t)
		st := &wrapStore{Store: newFakeStore()}
		p := lastseen.NewPipeline(buf, st, lastseen.Config{Now: clk.Now, FlushBatch: 3})
		exactUsers(t, p, 10, t0)
		must(t, p.Flush(ctx))
		clk.Advance(8 * 24 * time.Hour)
		must(t, p.RecordExact(ctx, "fresh", clk.Now()))
		st.failNext.Store(1000)
		must(t, p.RecordExact(ctx, "olddirty", t0))
		_ = p.Flush(ctx) // fails: olddirty and fresh stay dirty
		n, err := p.Trim(ctx)
		must(t, err)
		if n != 10 {
			t.Fatalf("trimmed %d, want 10", n)
		}
		wantStats(t, buf, lastseen.BufferStats{Users: 2, Dirty: 2})
		wantMetric(t, p, 10, "presenced_lastseen_trimmed_total")
		// Still served: from the store.
		r := lastseen.NewReader(lastseen.ReaderDeps{Status: &fakeStatus{}, Buffer: buf, Store: st, Now: clk.Now})
		got, err := r.Presence(ctx, "u00003", "u00003")
		must(t, err)
		if *got.LastSeen != "2026-11-30T11:00:00.126Z" {
			t.Fatalf("after trim: %s", js(got))
		}
	})
}

// The coarsening map forgets users idle for a coarse interval.
func TestCoarseMapBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	clk := newClock(t0)
	p := lastseen.NewPipeline(lastseen.NewMemory(), newFakeStore(), lastseen.Config{Now: clk.Now, FlushInterval: 5 * time.Millisecond})
	for i := range 100 {
		must(t, p.Record(ctx, fmt.Sprintf("u%d", i), t0))
	}
	wantMetric(t, p, 100, "presenced_lastseen_coarse_entries")
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	clk.Advance(10*time.Minute + time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for metric(t, p, "presenced_lastseen_coarse_entries") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("coarse map not emptied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	must(t, <-done)
}

// HandleEvents is a presence.Sink: offline records the exact LastSeen,
// online records activity, other events (away among them) are ignored.
func TestHandleEvents(t *testing.T) {
	ctx := t.Context()
	buf := lastseen.NewMemory()
	st := newFakeStore()
	p := lastseen.NewPipeline(buf, st, lastseen.Config{})
	var sink presence.Sink = p.HandleEvents
	sink(ctx, []presence.Event{
		{Kind: presence.EventStatus, UserID: "off", At: t0.Add(time.Minute), Status: presence.Offline, LastSeen: t0},
		{Kind: presence.EventStatus, UserID: "on", At: t0, Status: presence.Online},
		{Kind: presence.EventJoin, UserID: "joined", ConversationID: "c", At: t0},
		{Kind: presence.EventStatus, UserID: "bad id", At: t0, Status: presence.Offline},
	})
	wantGet(t, buf, []string{"off", "on", "joined"}, []time.Time{t0, {}, {}})
	must(t, p.Flush(ctx))
	if got := storedTimes(t, st, []string{"off", "on", "joined"}); len(got) != 2 || !got["off"].Equal(t0) || !got["on"].Equal(t0) {
		t.Fatalf("stored %v", got)
	}
}

// FlushBatch is capped at the store's limit: 10,001 dirty users are two
// statements.
func TestFlushBatchCapped(t *testing.T) {
	ctx := t.Context()
	st := &wrapStore{Store: newFakeStore()}
	buf := lastseen.NewMemory()
	p := lastseen.NewPipeline(buf, st, lastseen.Config{FlushBatch: 50_000})
	var batch []store.LastSeen
	for i := range store.MaxIDs + 1 {
		batch = append(batch, store.LastSeen{UserID: fmt.Sprintf("u%d", i), At: t0})
	}
	must(t, buf.Record(ctx, batch))
	must(t, p.Flush(ctx))
	if n := st.upserts.Load(); n != 2 {
		t.Fatalf("%d statements", n)
	}
	wantStats(t, buf, lastseen.BufferStats{Users: store.MaxIDs + 1})
}

func TestCollectorsRegister(t *testing.T) {
	p := lastseen.NewPipeline(lastseen.NewMemory(), newFakeStore(), lastseen.Config{})
	reg := prometheus.NewPedanticRegistry()
	for _, c := range p.Collectors() {
		must(t, reg.Register(c))
	}
	// A second pipeline's collectors are its own (one registry per node).
	p2 := lastseen.NewPipeline(lastseen.NewMemory(), newFakeStore(), lastseen.Config{})
	reg2 := prometheus.NewPedanticRegistry()
	for _, c := range p2.Collectors() {
		must(t, reg2.Register(c))
	}
	mfs, err := reg.Gather()
	must(t, err)
	if len(mfs) < 10 {
		t.Fatalf("%d metric families", len(mfs))
	}
}

// The presence engine's events drive the pipeline end to end: connect,
// disconnect, the flap grace ends, the exact offline time is buffered and
// read back through the engine as StatusReader.
func TestWithPresenceEngine(t *testing.T) {
	ctx := t.Context()
	clk := newClock(t0)
	buf := lastseen.NewMemory()
	st := newFakeStore()
	p := lastseen.NewPipeline(buf, st, lastseen.Config{Now: clk.Now})
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Now: clk.Now, Sink: p.HandleEvents})
	r := lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: st, Now: clk.Now})

	must(t, eng.Connect(ctx, presence.Socket{ID: "s1", UserID: "alice"}))
	got, err := r.Presence(ctx, "bob", "alice")
	must(t, err)
	if got.Status != "online" {
		t.Fatalf("connected: %s", js(got))
	}
	clk.Advance(90 * time.Second)
	gone := clk.Now()
	must(t, eng.Disconnect(ctx, "s1"))
	clk.Advance(5 * time.Second) // past the flap grace
	must(t, eng.Tick(ctx))
	wantGet(t, buf, []string{"alice"}, []time.Time{gone})
	got, err = r.Presence(ctx, "alice", "alice")
	must(t, err)
	if got.Status != "offline" || *got.LastSeen != timestamp.Format(gone) {
		t.Fatalf("after disconnect: %s, want lastSeen %s", js(got), timestamp.Format(gone))
	}
	must(t, p.Flush(ctx))
	if s := storedTimes(t, st, []string{"alice"}); !s["alice"].Equal(gone) {
		t.Fatalf("stored %v", s)
	}
}

// With Config.Online (one node), each flush writes the online list's
// changes and the alive moment: a user who went offline leaves the list
// only once their exact time is stored, so after a crash the users still
// listed get the last alive moment and the others keep their own times.
func TestOnlineList(t *testing.T) {
	ctx := t.Context()
	lite := tempSQLite(t)
	st := &wrapStore{Store: lite}
	now := t0.Add(time.Hour)
	p := lastseen.NewPipeline(lastseen.NewMemory(), st, lastseen.Config{Online: lite, Now: func() time.Time { return now }})
	if n, err := p.RecoverOnline(ctx); err != nil || n != 0 {
		t.Fatalf("recover on a fresh store: %d %v", n, err)
	}
	p.HandleEvents(ctx, []presence.Event{
		{Kind: presence.EventStatus, UserID: "u1", Status: presence.Online, At: t0},
		{Kind: presence.EventStatus, UserID: "u2", Status: presence.Online, At: t0},
		{Kind: presence.EventStatus, UserID: "u3", Status: presence.Online, At: t0},
	})
	must(t, p.Flush(ctx)) // listed: u1 u2 u3, alive t0+1h
	now = now.Add(time.Minute)
	offAt := t0.Add(90 * time.Minute)
	p.HandleEvents(ctx, []presence.Event{
		{Kind: presence.EventStatus, UserID: "u2", Status: presence.Offline, At: offAt, LastSeen: offAt},
		{Kind: presence.EventStatus, UserID: "u3", Status: presence.Away, At: t0.Add(61 * time.Minute)},
	})
	st.failNext.Store(1)
	if err := p.Flush(ctx); err == nil {
		t.Fatal("a flush whose store write failed succeeded")
	}
	// a crash now: u2's time is not stored, so u2 is still listed
	n, err := lite.RecoverOnline(ctx)
	if err != nil || n != 3 {
		t.Fatalf("after the failed flush: %d users listed (%v), want 3", n, err)
	}
	// the list is empty now, as at a restart; the pipeline's next flush
	// writes what it kept: u2 leaves (its time stored first), u3 stays
	must(t, lite.KeepOnline(ctx, now, []string{"u1", "u2", "u3"}, nil))
	now = now.Add(time.Minute)
	must(t, p.Flush(ctx))
	n, err = lite.RecoverOnline(ctx)
	if err != nil || n != 2 {
		t.Fatalf("after the next flush: %d users listed (%v), want 2 (u1, u3)", n, err)
	}
	got, err := lite.LastSeen(ctx, []string{"u1", "u2", "u3"})
	must(t, err)
	if !got["u2"].Equal(offAt) || !got["u1"].Equal(now) || !got["u3"].Equal(now) {
		t.Fatalf("last-seen after the recovery %v: want u2 at its offline time %v, u1 and u3 at the alive moment %v", got, offAt, now)
	}
}

// Between flushes the users whose status changed are added to the online
// list (WriteArrivals, every PushInterval), without moving the alive
// moment: after a crash a user who came after the last flush, or came and
// went since, gets the last flush's moment, as the users listed then do
// (before, they were not listed: "never seen", or an older stored time);
// before the run's first flush, the moment the run began.
func TestOnlineListArrivals(t *testing.T) {
	ctx := t.Context()
	lite := tempSQLite(t)
	now := t0.Add(time.Hour)
	p := lastseen.NewPipeline(lastseen.NewMemory(), lite, lastseen.Config{Online: lite, Now: func() time.Time { return now }})
	must(t, lite.UpsertLastSeen(ctx, []store.LastSeen{{UserID: "back", At: t0}})) // an older stored time
	if _, err := p.RecoverOnline(ctx); err != nil {
		t.Fatal(err)
	}
	must(t, lite.KeepOnline(ctx, t0.Add(-time.Hour), nil, nil)) // an earlier run's alive moment
	born := now
	// before this run's first flush: listed, with the moment it began
	now = now.Add(5 * time.Second)
	p.HandleEvents(ctx, []presence.Event{{Kind: presence.EventStatus, UserID: "early", Status: presence.Online, At: now}})
	must(t, p.WriteArrivals(ctx))
	if n, err := lite.RecoverOnline(ctx); err != nil || n != 1 {
		t.Fatalf("%d users listed before the first flush (%v), want 1", n, err)
	}
	if got, err := lite.LastSeen(ctx, []string{"early"}); err != nil || !got["early"].Equal(born) {
		t.Fatalf("before the first flush: last-seen %v (%v), want the run's start %v, not an earlier run's moment", got, err, born)
	}
	p.HandleEvents(ctx, []presence.Event{
		{Kind: presence.EventStatus, UserID: "old", Status: presence.Online, At: now},
		{Kind: presence.EventStatus, UserID: "graced", Status: presence.Online, At: now.Add(-5 * time.Second)},
	})
	must(t, p.Flush(ctx)) // listed: old, graced; alive: now
	flushed := now
	now = now.Add(10 * time.Second)
	p.HandleEvents(ctx, []presence.Event{
		{Kind: presence.EventStatus, UserID: "new", Status: presence.Online, At: now},
		{Kind: presence.EventStatus, UserID: "back", Status: presence.Online, At: now},
		{Kind: presence.EventStatus, UserID: "brief", Status: presence.Online, At: now},
		{Kind: presence.EventStatus, UserID: "brief", Status: presence.Offline, At: now, LastSeen: now.Add(-time.Second)},
		// its connection closed before the flush, which fell in its flap grace
		{Kind: presence.EventStatus, UserID: "graced", Status: presence.Offline, At: now, LastSeen: flushed.Add(-2 * time.Second)},
	})
	before := p.Stats().Statements
	must(t, p.WriteArrivals(ctx))
	must(t, p.WriteArrivals(ctx)) // nothing new: no statement
	if s := p.Stats().Statements - before; s != 2 {
		t.Fatalf("%d statements for the arrivals, want 2 (the times of those who went, the list)", s)
	}
	// a crash now, before the next flush: those online get the last
	// flush's moment; those who went keep their exact time (before
	// 2026-12-07 they were listed, and got the flush's moment too)
	n, err := lite.RecoverOnline(ctx)
	if err != nil || n != 4 {
		t.Fatalf("%d users listed (%v), want 4", n, err)
	}
	got, err := lite.LastSeen(ctx, []string{"early", "old", "new", "back", "brief", "graced"})
	must(t, err)
	for _, u := range []string{"early", "old", "new", "back"} {
		if !got[u].Equal(flushed) {
			t.Errorf("%s: last-seen %v after the crash, want the last flush's moment %v", u, got[u], flushed)
		}
	}
	for u, want := range map[string]time.Time{"brief": now.Add(-time.Second), "graced": flushed.Add(-2 * time.Second)} {
		if !got[u].Equal(want) {
			t.Errorf("%s: last-seen %v after the crash, want the exact time %v", u, got[u], want)
		}
	}
}

// tempSQLite is a store in a file of the test's, closed after it.
func tempSQLite(t *testing.T) *store.SQLite {
	t.Helper()
	lite, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "p.db"), store.SQLiteConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	return lite
}
