package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
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
type Subscriptions struct {
	bus     presence.StatusBus
	viewers Viewers
	log     *slog.Logger

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
	return &Subscriptions{bus: bus, viewers: viewers, log: log, byUser: map[string]map[*Conn]struct{}{}}
}

// Replace sets a socket's subscription set (empty unsubscribes).
func (s *Subscriptions) Replace(c *Conn, ids []string) {
	want := make(map[string]subState, len(ids))
	for _, id := range ids {
		want[id] = subState{}
	}
	var watch, unwatch []string
	s.mu.Lock()
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		s.mu.Unlock()
		return
	}
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
func remember(c *Conn, p lastseen.Presence) bool {
	b, _ := json.Marshal(p)
	hidden := p.Status == lastseen.StatusHidden
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.subs[p.UserID]
	if !ok || prev.json == string(b) {
		return false
	}
	if hidden && (prev.hidden || prev.json == "") {
		return false
	}
	c.subs[p.UserID] = subState{json: string(b), hidden: hidden}
	return true
}

// Deliver pushes a status change to this node's subscribers of the user,
// each filtered for its viewer.
func (s *Subscriptions) Deliver(ctx context.Context, e presence.Event) {
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
	up := presence.UserPresence{UserID: e.UserID, Status: e.Status, LastSeen: e.LastSeen}
	if e.Status != presence.Offline {
		up.Since = e.At
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ps, err := s.viewers.PresencesFor(ctx, up, viewers)
	if err != nil {
		s.log.Warn("presence update not delivered", "user_id", e.UserID, "err", err)
		return
	}
	for i, c := range conns {
		if i < len(ps) && remember(c, ps[i]) {
			if err := s.send(c, "presence:update", ps[i]); err != nil {
				s.log.Debug("presence update emit failed", "sid", c.sid, "err", err)
			}
		}
	}
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
