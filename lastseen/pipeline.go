package lastseen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/internal/defaults"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/timestamp"
)

// ErrInvalidUser is returned for a user id the store would refuse.
var ErrInvalidUser = errors.New("lastseen: invalid user id")

// Config tunes a Pipeline. Zero values mean the defaults.
type Config struct {
	// Coarse: at most one activity record per user per interval on this
	// node (PRESENCE_LASTSEEN_COARSE), 10m.
	Coarse time.Duration
	// DirectActivity: activity records (Record; the online statuses of
	// HandleEvents) do not go through the buffer's dirty set.
	// At each flush this node writes its own straight to the store, one
	// statement per FlushBatch users, and raises the times of those users
	// the buffer holds already (Buffer.Raise), adding none. Offline times
	// (RecordExact) go through the buffer as always. Set with Redis: an
	// activity record is read only when a user's offline time is lost (a
	// Redis restart without persistence, a lost reply, the crash of the
	// node recording it), and it cost every online user an entry in
	// Redis (about 157 bytes) until trimmed; now it costs a user who has
	// no buffered time nothing there. Off, records are pushed to the
	// buffer every PushInterval (one node: the memory buffer).
	DirectActivity bool
	// FlushInterval between flushes (PRESENCE_LASTSEEN_FLUSH_INTERVAL), 30s.
	FlushInterval time.Duration
	// FlushBatch: users per store statement (PRESENCE_LASTSEEN_FLUSH_BATCH),
	// 1000, at most store.MaxIDs.
	FlushBatch int
	// Retention: buffered times older than this are forgotten once written
	// (the store keeps them), 7 days.
	Retention time.Duration
	// ClaimTimeout: a claim not ended after this long (its flusher died) is
	// made dirty again by any node's next flush, 2m. One store write may
	// take at most half of it.
	ClaimTimeout time.Duration
	// PushInterval: how often the coarsened records of this node go to the
	// buffer in one batch (with DirectActivity: the offline times whose
	// RecordExact failed), 1s.
	PushInterval time.Duration
	// RetryMin and RetryMax bound the exponential back-off of Run after a
	// failed flush: 1s, doubling, at most 30s (with ±20% jitter). One
	// statement every half minute does not burden a store that is down,
	// and once it is back the backlog goes out within that bound (at most
	// 5m, as before, left the buffer growing for minutes after a one-minute
	// outage).
	RetryMin, RetryMax time.Duration
	// Online: a single node (no Redis) keeps there which users it has
	// online and when it was last alive, at each flush, for the recovery
	// of a crash (store.OnlineKeeper; see RecoverOnline). nil: not kept
	// (a cluster: a dead node's users are reaped by the others).
	Online store.OnlineKeeper
	// Now is the clock, time.Now.
	Now func() time.Time
	// Log receives flush failures and recoveries; nil discards.
	Log *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Coarse = defaults.Positive(c.Coarse, 10*time.Minute)
	c.FlushInterval = defaults.Positive(c.FlushInterval, 30*time.Second)
	c.FlushBatch = defaults.Positive(c.FlushBatch, 1000)
	c.FlushBatch = min(c.FlushBatch, store.MaxIDs)
	c.Retention = defaults.Positive(c.Retention, 7*24*time.Hour)
	c.ClaimTimeout = defaults.Positive(c.ClaimTimeout, 2*time.Minute)
	c.PushInterval = defaults.Positive(c.PushInterval, time.Second)
	c.RetryMin = defaults.Positive(c.RetryMin, time.Second)
	c.RetryMax = defaults.Positive(c.RetryMax, 30*time.Second)
	c.RetryMax = max(c.RetryMax, c.RetryMin)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Pipeline turns activity into last-seen rows with few database writes:
//
//	Record ─coarsen─► pending (memory) ─push, 1/s─► Buffer ─flush, 1 statement per batch─► store
//	RecordExact ───────────────────────────────────► Buffer (at once)
//	DirectActivity: pending ─flush─► Buffer.Raise, store (1 statement per batch)
//
// Coarsening keeps at most one activity record per user per Coarse on this
// node; the buffer keeps the latest time per user (never lower) and which
// users are dirty; a flush claims up to FlushBatch dirty users atomically
// and writes them with one store.UpsertLastSeen. A failed write gives the
// users back; a flusher that dies after claiming is covered by Requeue
// after ClaimTimeout. Any number of nodes may flush one shared buffer.
type Pipeline struct {
	cfg Config
	buf Buffer
	st  store.Store
	log *slog.Logger
	m   *metrics

	mu      sync.Mutex
	recent  map[string]int64 // user → last record on this node (ms), for coarsening
	pending map[string]int64 // recorded here, not yet in the buffer (ms); with DirectActivity, not yet in the store
	// exact: with DirectActivity, offline times whose RecordExact failed,
	// for push to send to the buffer again (ms); without it they wait in
	// pending, which push sends there too.
	exact  map[string]int64
	lastGC time.Time
	// online (Config.Online): users whose status changed since the list
	// in the store was last written, true if online (or away) now
	online map[string]bool
	// arrived (Config.Online): users whose status changed since the list
	// was last written, by a flush or by writeArrivals, which adds them
	// to it between flushes (a user who came after the last flush, or
	// came and went since, is then listed at a crash)
	arrived map[string]struct{}
	// gone (Config.Online): users who went offline since writeArrivals
	// last ran, with their exact last-seen (ms), which it stores
	gone      map[string]int64
	recovered bool // RecoverOnline ran (under flushMu)
	// born is when the pipeline was made; alive, whether a flush of its
	// has written the alive moment (under flushMu)
	born  time.Time
	alive bool

	flushMu  sync.Mutex // one flush at a time per pipeline
	lastTrim time.Time

	statements, rows atomic.Int64

	infoMu sync.Mutex
	info   FlushInfo // the last flush, for the admin panel (admin.go)
}

// NewPipeline returns a pipeline from buf to st; call Run to flush
// periodically and Flush at shutdown.
func NewPipeline(buf Buffer, st store.Store, cfg Config) *Pipeline {
	cfg = cfg.withDefaults()
	p := &Pipeline{
		cfg:     cfg,
		buf:     buf,
		st:      st,
		log:     cfg.Log,
		recent:  map[string]int64{},
		pending: map[string]int64{},
		exact:   map[string]int64{},
		online:  map[string]bool{},
		arrived: map[string]struct{}{},
		gone:    map[string]int64{},
		lastGC:  cfg.Now(),
		born:    cfg.Now(),
	}
	p.m = newMetrics(p)
	return p
}

// Buffer returns the pipeline's buffer (for a Reader).
func (p *Pipeline) Buffer() Buffer { return p.buf }

// Record notes activity of userID at `at`. Within Coarse of the user's last
// record on this node it costs one map lookup; otherwise the time is queued
// for the buffer, which Run pushes every PushInterval (and Flush at once),
// or with DirectActivity for the store, which Flush writes.
func (p *Pipeline) Record(_ context.Context, userID string, at time.Time) error {
	ms := timestamp.Millis(at)
	coarse := p.cfg.Coarse.Milliseconds()
	p.mu.Lock()
	if last, ok := p.recent[userID]; ok && ms < last+coarse {
		p.mu.Unlock()
		p.m.coarsened.Inc()
		return nil
	}
	if !ids.Valid(userID) {
		p.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrInvalidUser, ids.Clip(userID))
	}
	p.recent[userID] = ms
	if ms > p.pending[userID] {
		p.pending[userID] = ms
	}
	p.mu.Unlock()
	p.m.buffered.Inc()
	return nil
}

// RecordExact writes userID's exact last-seen time (their last connection
// closed at `at`) to the buffer at once, bypassing coarsening; the user is
// dirty when it returns nil. On a buffer error the time is kept and pushed
// to the buffer again every PushInterval until it is there: the error
// informs, nothing is lost.
func (p *Pipeline) RecordExact(ctx context.Context, userID string, at time.Time) error {
	if !ids.Valid(userID) {
		return fmt.Errorf("%w: %q", ErrInvalidUser, ids.Clip(userID))
	}
	ms := timestamp.Millis(at)
	p.mu.Lock()
	if ms > p.recent[userID] {
		p.recent[userID] = ms
	}
	p.mu.Unlock()
	p.m.exact.Inc()
	if err := p.buf.Record(ctx, []store.LastSeen{{UserID: userID, At: at}}); err != nil {
		p.keepPending(p.unpushed(), map[string]int64{userID: ms})
		return fmt.Errorf("lastseen: record exact (kept for retry): %w", err)
	}
	return nil
}

// HandleEvents feeds presence events to the pipeline; it has the shape of
// a presence.Sink so it can be chained into one. An offline status records
// its exact LastSeen (or the event time); online counts as seen. Away does
// not: it says the user has been idle, not that they were there then, and
// a user whose last socket was on a node that died is turned away by
// another node before the dead node is reaped, so that moment could be
// later than the user's last connection closed (the GREATEST of the
// records is kept, and it outlived the exact offline time). Errors are
// logged: the records are kept for retry.
func (p *Pipeline) HandleEvents(ctx context.Context, events []presence.Event) {
	for _, ev := range events {
		if ev.Kind != presence.EventStatus || ev.UserID == "" {
			continue
		}
		at := ev.At
		if ev.Status == presence.Offline && !ev.LastSeen.IsZero() {
			at = ev.LastSeen
		}
		if p.cfg.Online != nil {
			p.mu.Lock()
			p.online[ev.UserID] = ev.Status != presence.Offline
			p.arrived[ev.UserID] = struct{}{}
			if ev.Status == presence.Offline && !at.IsZero() {
				p.gone[ev.UserID] = timestamp.Millis(at)
			} else {
				delete(p.gone, ev.UserID)
			}
			p.mu.Unlock()
		}
		var err error
		switch ev.Status {
		case presence.Offline:
			if at.IsZero() {
				continue
			}
			err = p.RecordExact(ctx, ev.UserID, at)
		case presence.Online:
			if at.IsZero() {
				at = p.cfg.Now()
			}
			err = p.Record(ctx, ev.UserID, at)
		}
		if err != nil {
			p.log.Warn("last-seen record failed", "user_id", ev.UserID, "err", err)
		}
	}
}

// push moves the records waiting for the buffer (unpushed) there in one
// batch; on failure they stay. With DirectActivity those are the offline
// times whose RecordExact failed: activity is left to Flush
// (writeActivity).
func (p *Pipeline) push(ctx context.Context) error {
	m := p.unpushed()
	batch, entries := p.takePending(m)
	if len(entries) == 0 {
		return nil
	}
	if err := p.buf.Record(ctx, entries); err != nil {
		p.keepPending(m, batch)
		return fmt.Errorf("lastseen: push %d records: %w", len(entries), err)
	}
	return nil
}

// unpushed is the map of records push sends to the buffer.
func (p *Pipeline) unpushed() *map[string]int64 {
	if p.cfg.DirectActivity {
		return &p.exact
	}
	return &p.pending
}

// writeActivity (DirectActivity) raises the buffered times of the pending
// records' users and writes the records to the store, FlushBatch users a
// statement; on failure they stay pending (the store keeps the later of
// two writes, so one written twice is harmless).
func (p *Pipeline) writeActivity(ctx context.Context) error {
	batch, entries := p.takePending(&p.pending)
	if len(entries) == 0 {
		return nil
	}
	err := p.buf.Raise(ctx, entries)
	for rest := entries; err == nil && len(rest) > 0; {
		n := min(len(rest), p.cfg.FlushBatch)
		err = p.storeRows(ctx, rest[:n])
		rest = rest[n:]
	}
	if err != nil {
		p.keepPending(&p.pending, batch)
		return fmt.Errorf("lastseen: write %d activity records: %w", len(entries), err)
	}
	return nil
}

// takePending takes the records of *m (pending or exact), as a map and as
// entries.
func (p *Pipeline) takePending(m *map[string]int64) (map[string]int64, []store.LastSeen) {
	p.mu.Lock()
	if len(*m) == 0 {
		p.mu.Unlock()
		return nil, nil
	}
	batch := *m
	*m = make(map[string]int64, len(batch))
	p.mu.Unlock()
	entries := make([]store.LastSeen, 0, len(batch))
	for id, ms := range batch {
		entries = append(entries, store.LastSeen{UserID: id, At: timestamp.FromMillis(ms)})
	}
	return batch, entries
}

// keepPending puts records that could not be sent into *m, keeping the
// later time of a user already there.
func (p *Pipeline) keepPending(m *map[string]int64, batch map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, ms := range batch {
		if ms > (*m)[id] {
			(*m)[id] = ms
		}
	}
}

// Flush pushes this node's pending records (with DirectActivity: writes
// its activity records to the store, writeActivity), gives back stale
// claims of dead flushers, then writes dirty users to the store in batches
// of FlushBatch (one statement each), back to back while batches are full.
// Call it at shutdown, after Run has returned, with a context that bounds
// the wait. A failed write leaves its users dirty (activity records: kept
// in this node's memory for the next flush).
func (p *Pipeline) Flush(ctx context.Context) error {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	start, before := time.Now(), p.Stats()
	err := p.flush(ctx)
	p.m.duration.Observe(time.Since(start).Seconds())
	p.noteFlush(start, before, err)
	if err != nil {
		p.m.errors.Inc()
	}
	p.observeBuffer(ctx)
	return err
}

func (p *Pipeline) flush(ctx context.Context) error {
	// The online list's changes are taken first: an offline change among
	// them had its time recorded before it (HandleEvents), so the user
	// leaves the list only once that time is stored, below.
	alive, changed := p.cfg.Now(), p.takeOnline()
	if err := p.push(ctx); err != nil {
		p.keepOnlineChanges(changed)
		return fmt.Errorf("lastseen: flush: %w", err)
	}
	var actErr error // a failed activity write does not hold back the dirty users' flush
	if p.cfg.DirectActivity {
		if actErr = p.writeActivity(ctx); actErr != nil {
			actErr = fmt.Errorf("lastseen: flush: %w", actErr)
		}
	}
	if err := p.flushDirty(ctx); err != nil {
		p.keepOnlineChanges(changed)
		return errors.Join(actErr, err)
	}
	return errors.Join(actErr, p.writeOnline(ctx, alive, changed))
}

// RecoverOnline (Config.Online) gives the users a crash left listed online
// the node's last alive moment as last-seen, and empties the list: call it
// at start, before the node takes connections. Until it has succeeded,
// each flush tries it again before writing the list (which would move the
// alive moment on).
func (p *Pipeline) RecoverOnline(ctx context.Context) (int, error) {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	return p.recoverOnline(ctx)
}

func (p *Pipeline) recoverOnline(ctx context.Context) (int, error) {
	if p.cfg.Online == nil || p.recovered {
		return 0, nil
	}
	n, err := p.cfg.Online.RecoverOnline(ctx)
	if err != nil {
		return 0, fmt.Errorf("lastseen: recover the users a crash left online: %w", err)
	}
	p.recovered = true
	if n > 0 {
		p.log.Warn("the last run ended without a clean shutdown: the users it had online get its last alive moment as last-seen", "users", n)
	}
	return n, nil
}

// takeOnline takes the online list's changes since the last write.
func (p *Pipeline) takeOnline() map[string]bool {
	if p.cfg.Online == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.online
	p.online = make(map[string]bool, len(changed))
	clear(p.arrived) // the flush writes them
	return changed
}

// writeArrivals (Config.Online) adds the users who came online since the
// list was last written to it (Run, every PushInterval), without moving
// the alive moment (before this run's first flush: the moment it began).
// Without it a user who came after the last flush was not listed at a
// crash, and had no last-seen after it, or an older one (the flush moment
// is what the others listed get). The users who went offline since have
// their exact last-seen stored first, and come off the list: listed, a
// crash before the next flush gave them the last alive moment instead,
// up to a flush interval before their exact time or, if that flush fell
// in their flap grace, a few seconds after it (a black-box audit,
// 2026-12-07). One statement when any came (two when any went).
func (p *Pipeline) writeArrivals(ctx context.Context) error {
	if p.cfg.Online == nil {
		return nil
	}
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.mu.Lock()
	users := slices.Collect(maps.Keys(p.arrived))
	clear(p.arrived)
	gone := p.gone
	p.gone = make(map[string]int64, len(gone))
	p.mu.Unlock()
	if len(users) == 0 && len(gone) == 0 {
		return nil
	}
	put := func() {
		p.keepPending(&p.gone, gone)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, u := range users {
			p.arrived[u] = struct{}{}
		}
	}
	if _, err := p.recoverOnline(ctx); err != nil {
		put()
		return err
	}
	var on, off []string
	for _, u := range users {
		if _, went := gone[u]; !went {
			on = append(on, u)
		}
	}
	rows := make([]store.LastSeen, 0, len(gone))
	for u, ms := range gone {
		rows = append(rows, store.LastSeen{UserID: u, At: timestamp.FromMillis(ms)})
		off = append(off, u)
	}
	for rest := rows; len(rest) > 0; {
		n := min(len(rest), p.cfg.FlushBatch)
		if err := p.storeRows(ctx, rest[:n]); err != nil {
			put()
			return fmt.Errorf("lastseen: store the times of the users who went offline: %w", err)
		}
		rest = rest[n:]
	}
	var alive time.Time // the last flush's stays
	if !p.alive {
		// no flush of this run has written one: the moment left is an
		// earlier run's, and everyone listed now came after this one began
		alive = p.born
	}
	for len(on) > 0 || len(off) > 0 {
		n, m := min(len(on), p.cfg.FlushBatch), min(len(off), p.cfg.FlushBatch)
		if err := p.cfg.Online.KeepOnline(ctx, alive, on[:n], off[:m]); err != nil {
			put()
			return fmt.Errorf("lastseen: list the users who came online: %w", err)
		}
		p.statements.Add(1)
		on, off = on[n:], off[m:]
	}
	return nil
}

// keepOnlineChanges puts changes that were not written back; a change
// made since wins.
func (p *Pipeline) keepOnlineChanges(changed map[string]bool) {
	if len(changed) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for u, on := range changed {
		if _, newer := p.online[u]; !newer {
			p.online[u] = on
		}
	}
}

// writeOnline (Config.Online) writes the online list's changes and the
// alive moment, FlushBatch users of each kind a statement (one statement
// when nothing changed: the moment alone).
func (p *Pipeline) writeOnline(ctx context.Context, alive time.Time, changed map[string]bool) error {
	if p.cfg.Online == nil {
		return nil
	}
	if _, err := p.recoverOnline(ctx); err != nil {
		p.keepOnlineChanges(changed)
		return err
	}
	var on, off []string
	for u, online := range changed {
		if online {
			on = append(on, u)
		} else {
			off = append(off, u)
		}
	}
	for first := true; first || len(on) > 0 || len(off) > 0; first = false {
		n, m := min(len(on), p.cfg.FlushBatch), min(len(off), p.cfg.FlushBatch)
		if err := p.cfg.Online.KeepOnline(ctx, alive, on[:n], off[:m]); err != nil {
			p.keepOnlineChanges(changed)
			return fmt.Errorf("lastseen: write the online list: %w", err)
		}
		p.alive = true
		p.statements.Add(1)
		on, off = on[n:], off[m:]
	}
	return nil
}

// flushDirty gives back stale claims, then writes dirty users (Flush).
func (p *Pipeline) flushDirty(ctx context.Context) error {
	n, err := p.buf.Requeue(ctx, p.cfg.Now().Add(-p.cfg.ClaimTimeout))
	if err != nil {
		return fmt.Errorf("lastseen: flush: %w", err)
	}
	if n > 0 {
		p.m.requeued.Add(float64(n))
		p.log.Info("last-seen claims of a dead flusher made dirty again", "users", n)
	}
	for {
		c, err := p.buf.Claim(ctx, p.cfg.FlushBatch, p.cfg.Now())
		if err != nil {
			return fmt.Errorf("lastseen: flush: %w", err)
		}
		if len(c.Entries) == 0 {
			return nil
		}
		if err := p.write(ctx, c); err != nil {
			return err
		}
		if len(c.Entries) < p.cfg.FlushBatch {
			return nil
		}
	}
}

// write stores one claim with one statement and ends the claim: Ack on
// success, Release on failure. Ending runs even when ctx was cancelled
// meanwhile (shutdown), within a few seconds of its own.
func (p *Pipeline) write(ctx context.Context, c Claim) error {
	rows := make([]store.LastSeen, 0, len(c.Entries))
	for _, e := range c.Entries {
		if ids.Valid(e.UserID) && !e.At.IsZero() {
			rows = append(rows, e)
		} else {
			// Only another writer of the shared buffer could put it there;
			// the store would refuse the whole batch for it.
			p.log.Warn("invalid last-seen entry dropped from the buffer", "user_id", ids.Clip(e.UserID))
		}
	}
	var err error
	if len(rows) > 0 {
		err = p.storeRows(ctx, rows)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err != nil {
		if rerr := p.buf.Release(ectx, c); rerr != nil {
			// The claim stays; Requeue gives it back after ClaimTimeout.
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("lastseen: flush: write %d users: %w", len(rows), err)
	}
	if err := p.buf.Ack(ectx, c); err != nil {
		// Written; the claim will be requeued and written once more, which
		// the store's later-wins upsert makes harmless.
		return fmt.Errorf("lastseen: flush: %w", err)
	}
	return nil
}

// storeRows writes rows with one statement, within half of ClaimTimeout,
// and counts it.
func (p *Pipeline) storeRows(ctx context.Context, rows []store.LastSeen) error {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.ClaimTimeout/2)
	err := p.st.UpsertLastSeen(wctx, rows)
	cancel()
	p.statements.Add(1)
	p.m.statements.Inc()
	if err == nil {
		p.rows.Add(int64(len(rows)))
		p.m.rows.Add(float64(len(rows)))
		p.m.batchRows.Observe(float64(len(rows)))
	}
	return err
}

// Trim forgets buffered times older than Retention that are neither dirty
// nor claimed, in rounds of FlushBatch, and returns how many. Run calls it
// every ten flush intervals.
func (p *Pipeline) Trim(ctx context.Context) (int, error) {
	cutoff := p.cfg.Now().Add(-p.cfg.Retention)
	total := 0
	for {
		n, err := p.buf.Trim(ctx, cutoff, p.cfg.FlushBatch)
		total += n
		p.m.trimmed.Add(float64(n))
		if err != nil {
			return total, fmt.Errorf("lastseen: trim: %w", err)
		}
		if n < p.cfg.FlushBatch {
			return total, nil
		}
	}
}

// gcRecent drops coarsening entries older than Coarse: they no longer
// suppress anything, so memory stays bounded by the users active within one
// interval.
func (p *Pipeline) gcRecent(now time.Time) {
	limit := timestamp.Millis(now.Add(-p.cfg.Coarse))
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, ms := range p.recent {
		if ms < limit {
			delete(p.recent, id)
		}
	}
	p.lastGC = now
}

func (p *Pipeline) maintain(ctx context.Context) {
	now := p.cfg.Now()
	p.mu.Lock()
	gcDue := now.Sub(p.lastGC) >= p.cfg.Coarse
	p.mu.Unlock()
	if gcDue {
		p.gcRecent(now)
	}
	if p.lastTrim.IsZero() || now.Sub(p.lastTrim) >= 10*p.cfg.FlushInterval {
		p.lastTrim = now
		if _, err := p.Trim(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("last-seen trim failed", "err", err)
		}
	}
}

// Run pushes records every PushInterval and flushes every FlushInterval
// until ctx ends, then returns nil. After a failed flush it retries with
// exponential back-off (RetryMin doubling to RetryMax). It does not flush
// at the end: call Flush with a shutdown deadline.
func (p *Pipeline) Run(ctx context.Context) error {
	flushT := time.NewTimer(p.cfg.FlushInterval)
	defer flushT.Stop()
	pushT := time.NewTicker(p.cfg.PushInterval)
	defer pushT.Stop()
	failures, pushFailing := 0, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pushT.C:
			err := errors.Join(p.push(ctx), p.writeArrivals(ctx))
			switch {
			case ctx.Err() != nil:
			case err != nil && !pushFailing:
				pushFailing = true
				p.log.Warn("last-seen push failed; records kept for retry", "err", err)
			case err == nil && pushFailing:
				pushFailing = false
				p.log.Info("last-seen push recovered")
			}
		case <-flushT.C:
			err := p.Flush(ctx)
			if ctx.Err() != nil {
				return nil
			}
			next := p.cfg.FlushInterval
			if err != nil {
				failures++
				next = p.backoff(failures)
				p.log.Warn("last-seen flush failed; dirty users kept", "err", err, "failures", failures, "retry_in", next.String())
			} else if failures > 0 {
				p.log.Info("last-seen flush recovered", "failures", failures)
				failures = 0
			}
			p.maintain(ctx)
			flushT.Reset(next)
		}
	}
}

// backoff is the wait before retry number n (1-based).
func (p *Pipeline) backoff(n int) time.Duration {
	d := p.cfg.RetryMin
	for i := 1; i < n && d < p.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, p.cfg.RetryMax)
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * jitter)
}

// Stats counts the store statements this pipeline sent and the rows they
// carried.
type Stats struct {
	Statements int64 // UpsertLastSeen calls, failed ones included
	Rows       int64 // rows in successful calls
}

// Stats returns the pipeline's write counters.
func (p *Pipeline) Stats() Stats {
	return Stats{Statements: p.statements.Load(), Rows: p.rows.Load()}
}

func (p *Pipeline) recentLen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.recent)
}

func (p *Pipeline) observeBuffer(ctx context.Context) {
	s, err := p.buf.Stats(ctx)
	if err != nil {
		return // the flush error says it already
	}
	p.m.bufferUsers.Set(float64(s.Users))
	p.m.dirty.Set(float64(s.Dirty))
	p.m.claimed.Set(float64(s.Claimed))
}
