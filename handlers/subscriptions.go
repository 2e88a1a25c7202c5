package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// Viewers answers privacy-filtered presence, for one viewer about many
// users and for one user's change to many viewers (lastseen.Reader).
type Viewers interface {
	Presences(ctx context.Context, viewerID string, userIDs []string) ([]lastseen.Presence, error)
	PresencesFor(ctx context.Context, up presence.UserPresence, viewerIDs []string) ([]lastseen.Presence, error)
}

// Subscriptions keeps this node's presence subscriptions (Slack's
// presence_sub model): each socket's set of watched users, the node's index
// from watched user to sockets, and the node's interest on the StatusBus.
//
// Status changes are delivered asynchronously (Deliver queues, Run's
// workers deliver): filtering a change for its viewers reads the store, and
// a slow store must not stall the bus's reader, which carries every other
// user's changes. The queue holds one change per user, the latest (only
// the latest status matters), and at most one worker delivers a user's
// changes at a time, so each user's changes go out in order.
type Subscriptions struct {
	bus     presence.StatusBus
	viewers Viewers
	log     *slog.Logger
	queue   statusQueue

	mu     sync.Mutex
	byUser map[string]map[*Conn]struct{} // watched user → local subscribers

	// emit sends to a socket; nil: the socket's own Emit (tests set it).
	emit func(c *Conn, event string, payload any) error
}

// subState is what a socket was last told of a subscribed user: the
// filtered presence's JSON, and whether it was hidden. The zero value is
// a subscription whose ack has not been built yet.
type subState struct {
	json   string
	hidden bool
}

// NewSubscriptions creates the registry.
func NewSubscriptions(bus presence.StatusBus, viewers Viewers, log *slog.Logger) *Subscriptions {
	s := &Subscriptions{bus: bus, viewers: viewers, log: log, byUser: map[string]map[*Conn]struct{}{}}
	s.queue.init(DeliveryWorkers, MaxQueuedStatus)
	return s
}

// Delivery of status changes (see Subscriptions).
const (
	// DeliveryWorkers deliver status changes concurrently (different
	// users only).
	DeliveryWorkers = 4
	// MaxQueuedStatus bounds the users with a change waiting to be
	// delivered; a change of another user beyond it is dropped (and
	// counted): its subscribers miss that change, not the next.
	MaxQueuedStatus = 10_000
)

// statusQueue holds the latest undelivered change of each user.
type statusQueue struct {
	workers, max int

	mu     sync.Mutex
	latest map[string]presence.Event // user → newest change no worker has taken
	ready  []string                  // users in latest and not busy, in arrival order
	busy   map[string]bool           // users a worker is delivering to
	wake   chan struct{}

	coalesced, dropped prometheus.Counter
	queued             prometheus.GaugeFunc
}

func (q *statusQueue) init(workers, max int) {
	q.workers, q.max = workers, max
	q.latest = map[string]presence.Event{}
	q.busy = map[string]bool{}
	q.wake = make(chan struct{}, 1)
	q.coalesced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "presenced_status_updates_coalesced_total",
		Help: "Status changes replaced by a newer change of the same user before they were delivered to subscribers.",
	})
	q.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "presenced_status_updates_dropped_total",
		Help: "Status changes not delivered to subscribers because the delivery queue was full.",
	})
	q.queued = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "presenced_status_updates_queued",
		Help: "Users with a status change waiting to be delivered to subscribers.",
	}, func() float64 { q.mu.Lock(); defer q.mu.Unlock(); return float64(len(q.latest)) })
}

func (q *statusQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *statusQueue) push(e presence.Event) {
	q.mu.Lock()
	if _, ok := q.latest[e.UserID]; ok {
		q.latest[e.UserID] = e
		q.mu.Unlock()
		q.coalesced.Inc()
		return
	}
	if len(q.latest) >= q.max {
		q.mu.Unlock()
		q.dropped.Inc()
		return
	}
	q.latest[e.UserID] = e
	if !q.busy[e.UserID] {
		q.ready = append(q.ready, e.UserID)
	}
	q.mu.Unlock()
	q.signal()
}

// take hands a worker the next user's latest change.
func (q *statusQueue) take() (presence.Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	u, ok := popFront(&q.ready)
	if !ok {
		return presence.Event{}, false
	}
	if len(q.ready) > 0 {
		q.signal() // another worker may take the next
	}
	e := q.latest[u]
	delete(q.latest, u)
	q.busy[u] = true
	return e, true
}

// done ends a worker's delivery to a user; a change that came meanwhile
// is ready now.
func (q *statusQueue) done(user string) {
	q.mu.Lock()
	delete(q.busy, user)
	_, more := q.latest[user]
	if more {
		q.ready = append(q.ready, user)
	}
	q.mu.Unlock()
	if more {
		q.signal()
	}
}

// Collectors returns the delivery queue's Prometheus collectors, for the
// owner of the registry to register.
func (s *Subscriptions) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.queue.coalesced, s.queue.dropped, s.queue.queued}
}

// Deliver queues a status change for this node's subscribers of the user
// (the StatusBus's callback); it never waits.
func (s *Subscriptions) Deliver(_ context.Context, e presence.Event) {
	s.mu.Lock()
	_, watched := s.byUser[e.UserID]
	s.mu.Unlock()
	if watched {
		s.queue.push(e)
	}
}

// Run delivers queued status changes until ctx ends.
func (s *Subscriptions) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range s.queue.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				e, ok := s.queue.take()
				if !ok {
					select {
					case <-s.queue.wake:
						continue
					case <-ctx.Done():
						return
					}
				}
				s.deliverNow(ctx, e)
				s.queue.done(e.UserID)
			}
		}()
	}
	wg.Wait()
}

// Replace sets a socket's subscription set (empty unsubscribes). It
// returns the set it replaced, for Restore.
func (s *Subscriptions) Replace(c *Conn, ids []string) (prev map[string]subState) {
	want := make(map[string]subState, len(ids))
	for _, id := range ids {
		want[id] = subState{}
	}
	return s.set(c, want)
}

// Restore puts back the set Replace returned (a subscribe that was then
// refused). What was sent meanwhile for a user in both stays recorded.
func (s *Subscriptions) Restore(c *Conn, prev map[string]subState) {
	want := make(map[string]subState, len(prev))
	maps.Copy(want, prev)
	s.set(c, want)
}

// set makes want the socket's subscriptions; a user already subscribed
// keeps what was last sent. It returns the set it replaced.
func (s *Subscriptions) set(c *Conn, want map[string]subState) (prev map[string]subState) {
	var watch, unwatch []string
	s.mu.Lock()
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		s.mu.Unlock()
		return nil
	}
	prev = c.subs
	for id := range c.subs {
		if _, keep := want[id]; keep {
			want[id] = c.subs[id] // keep what was last sent
			continue
		}
		if set := s.byUser[id]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(s.byUser, id)
				unwatch = append(unwatch, id)
			}
		}
	}
	for id := range want {
		set := s.byUser[id]
		if set == nil {
			set = map[*Conn]struct{}{}
			s.byUser[id] = set
			watch = append(watch, id)
		}
		set[c] = struct{}{}
	}
	if len(want) == 0 {
		want = nil
	}
	c.subs = want
	c.mu.Unlock()
	s.mu.Unlock()
	if len(unwatch) > 0 {
		s.bus.Unwatch(unwatch...)
	}
	if len(watch) > 0 {
		s.bus.Watch(watch...)
	}
	return prev
}

// Drop removes a closing socket's subscriptions.
func (s *Subscriptions) Drop(c *Conn) { s.Replace(c, nil) }

// remember decides whether a socket is told of p, and records it as last
// sent if so. An update that would tell the socket nothing new is not
// sent, nor is a hidden one unless the socket last saw the user visible:
// a hidden user's changes must not be observable (CONTRACT §3), and the
// mere timing of an update would reveal one (a hidden user coming online
// moves its bucket to "recently"). A subscription whose ack is still being
// built (the socket has seen nothing yet) gets no hidden update either:
// the ack carries the hidden presence.
// js is p's JSON.
func remember(c *Conn, p lastseen.Presence, js string) bool {
	hidden := p.Status == lastseen.StatusHidden
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.subs[p.UserID]
	if !ok || prev.json == js {
		return false
	}
	if hidden && (prev.hidden || prev.json == "") {
		return false
	}
	c.subs[p.UserID] = subState{json: js, hidden: hidden}
	return true
}

// presenceForm is a filtered presence as a comparable value: the viewers
// of one change see a few distinct forms of it (CONTRACT §3), and each
// form is encoded once, for all the sockets that see it.
type presenceForm struct {
	userID, status, lastSeen, bucket, display string
	hasLastSeen, hasBucket                    bool
}

func formOf(p lastseen.Presence) presenceForm {
	f := presenceForm{userID: p.UserID, status: p.Status, display: p.Display}
	if p.LastSeen != nil {
		f.lastSeen, f.hasLastSeen = *p.LastSeen, true
	}
	if p.LastSeenBucket != nil {
		f.bucket, f.hasBucket = *p.LastSeenBucket, true
	}
	return f
}

// encodedForm is one form's JSON (what remember compares) and, once a
// socket is sent it, its packet (transport.Frame).
type encodedForm struct {
	json  string
	frame *transport.Frame
}

// deliverNow pushes a status change to this node's subscribers of the
// user, each filtered for its viewer.
func (s *Subscriptions) deliverNow(ctx context.Context, e presence.Event) {
	s.mu.Lock()
	set := s.byUser[e.UserID]
	conns := make([]*Conn, 0, len(set))
	for c := range set {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if len(conns) == 0 {
		return
	}
	viewers := make([]string, len(conns))
	for i, c := range conns {
		viewers[i] = c.UserID
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ps []lastseen.Presence
	var err error
	if e.Kind == refreshEvent {
		ps, err = s.current(ctx, e.UserID, viewers)
	} else {
		up := presence.UserPresence{UserID: e.UserID, Status: e.Status, LastSeen: e.LastSeen}
		if e.Status != presence.Offline {
			up.Since = e.At
		}
		ps, err = s.viewers.PresencesFor(ctx, up, viewers)
	}
	if err != nil {
		s.log.Warn("presence update not delivered", "user_id", e.UserID, "err", err)
		return
	}
	forms := map[presenceForm]*encodedForm{}
	for i, c := range conns {
		if i >= len(ps) {
			break
		}
		key := formOf(ps[i])
		f := forms[key]
		if f == nil {
			b, _ := json.Marshal(ps[i])
			f = &encodedForm{json: string(b)}
			forms[key] = f
		}
		if remember(c, ps[i], f.json) {
			if err := s.sendForm(c, ps[i], f); err != nil {
				s.log.Debug("presence update emit failed", "sid", c.sid, "err", err)
			}
		}
	}
}

// sendForm sends a socket `presence:update` with p, encoded once per form.
func (s *Subscriptions) sendForm(c *Conn, p lastseen.Presence, f *encodedForm) error {
	if s.emit != nil || c.sock == nil {
		return s.send(c, "presence:update", p)
	}
	if f.frame == nil {
		f.frame = transport.EventFrame(c.sock.Nsp(), "presence:update", p)
	}
	f.frame.WriteTo(c.sock)
	return nil
}

// refreshEvent is a queued "the user's privacy changed": subscribers are
// sent the user's current presence, filtered anew, if it differs from what
// they last saw. So a user who hides is shown hidden at once, and their
// next status change is not the moment their subscribers see them go
// hidden.
const refreshEvent presence.EventKind = -1

// Refresh queues a refresh of a user's subscribers on this node (their
// last-seen setting changed).
func (s *Subscriptions) Refresh(userID string) {
	s.Deliver(context.Background(), presence.Event{Kind: refreshEvent, UserID: userID})
}

// RefreshViewer sends a socket the presence of each user it subscribes to
// as its user may see them now, where that differs from what it last saw
// (remember): the viewer's own setting changed (CONTRACT §3, reciprocity),
// so what it may see of everyone did. One read for all its subscriptions.
func (s *Subscriptions) RefreshViewer(ctx context.Context, c *Conn) {
	c.mu.Lock()
	users := make([]string, 0, len(c.subs))
	for u, st := range c.subs {
		if st.json != "" { // an ack still being built carries the news
			users = append(users, u)
		}
	}
	c.mu.Unlock()
	if len(users) == 0 {
		return
	}
	ps, err := s.viewers.Presences(ctx, c.UserID, users)
	if err != nil {
		s.log.Warn("presence updates after a privacy change not delivered", "sid", c.sid, "err", err)
		return
	}
	for _, p := range ps {
		b, _ := json.Marshal(p)
		f := &encodedForm{json: string(b)}
		if remember(c, p, f.json) {
			if err := s.sendForm(c, p, f); err != nil {
				s.log.Debug("presence update emit failed", "sid", c.sid, "err", err)
			}
		}
	}
}

// current reads a user's presence as each viewer may see it now.
func (s *Subscriptions) current(ctx context.Context, user string, viewers []string) ([]lastseen.Presence, error) {
	seen := map[string]lastseen.Presence{}
	out := make([]lastseen.Presence, len(viewers))
	for i, v := range viewers {
		p, ok := seen[v]
		if !ok {
			ps, err := s.viewers.Presences(ctx, v, []string{user})
			if err != nil {
				return nil, err
			}
			if len(ps) != 1 {
				return nil, fmt.Errorf("subscriptions: %d presences for 1 user", len(ps))
			}
			p = ps[0]
			seen[v] = p
		}
		out[i] = p
	}
	return out, nil
}

func (s *Subscriptions) send(c *Conn, event string, payload any) error {
	if s.emit != nil {
		return s.emit(c, event, payload)
	}
	return c.sock.Emit(event, payload)
}

// seed records the presences a subscribe ack returned as last sent.
func seed(c *Conn, ps []lastseen.Presence) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		if _, ok := c.subs[p.UserID]; ok {
			b, _ := json.Marshal(p)
			c.subs[p.UserID] = subState{json: string(b), hidden: p.Status == lastseen.StatusHidden}
		}
	}
}
