package handlers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
	"github.com/presenced/presenced/store"
)

// truth is a Viewers over users' true presence and settings, filtered by
// lastseen.Filter as the real reader does.
type truth struct {
	users    enginetest.Statuses
	mu       sync.Mutex
	settings map[string]store.Visibility
	now      time.Time
}

func (tr *truth) filter(viewer string, up presence.UserPresence) lastseen.Presence {
	return lastseen.Filter(viewer, lastseen.Target{
		UserID: up.UserID, Status: up.Status, LastSeen: up.LastSeen, Setting: tr.settings[up.UserID],
	}, tr.settings[viewer], tr.now)
}

func (tr *truth) Presences(ctx context.Context, viewer string, ids []string) ([]lastseen.Presence, error) {
	ups, _ := tr.users.Users(ctx, ids)
	return tr.filterEach(len(ups), func(i int) (string, presence.UserPresence) { return viewer, ups[i] }), nil
}

func (tr *truth) PresencesFor(_ context.Context, up presence.UserPresence, viewers []string) ([]lastseen.Presence, error) {
	tr.users.Set(up)
	return tr.filterEach(len(viewers), func(i int) (string, presence.UserPresence) { return viewers[i], up }), nil
}

// filterEach filters n presences, the i-th as pair(i) gives its viewer and
// target.
func (tr *truth) filterEach(n int, pair func(i int) (string, presence.UserPresence)) []lastseen.Presence {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]lastseen.Presence, n)
	for i := range out {
		out[i] = tr.filter(pair(i))
	}
	return out
}

type emitted struct {
	sid string
	p   lastseen.Presence
}

func recordingSubs(tr *truth) (*Subscriptions, func() []emitted) {
	s := NewSubscriptions(presence.NewLocalBus(), tr, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	var got []emitted
	s.emit = func(c *Conn, _ string, payload any) error {
		mu.Lock()
		got = append(got, emitted{c.sid, payload.(lastseen.Presence)})
		mu.Unlock()
		return nil
	}
	return s, func() []emitted { mu.Lock(); defer mu.Unlock(); return append([]emitted(nil), got...) }
}

// subscribeNow does what the presence:subscribe handler does: replace,
// read, seed (the ack).
func subscribeNow(t *testing.T, s *Subscriptions, tr *truth, c *Conn, ids ...string) []lastseen.Presence {
	t.Helper()
	s.Replace(c, ids)
	ps, err := tr.Presences(context.Background(), c.UserID, ids)
	if err != nil {
		t.Fatal(err)
	}
	seed(c, ps)
	return ps
}

// A hidden user's status changes reach no subscriber, whatever the
// subscribe churn of the viewer's other sockets (#12 finding 1): not the
// socket subscribed all along (whose last "hidden" differs only in its
// bucket), nor a socket whose subscription is between its replace and its
// ack. A visible user's changes are still delivered, once each.
func TestHiddenChangesNotDeliveredUnderChurn(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := &truth{settings: map[string]store.Visibility{"h": store.Nobody}, now: now}
	s, got := recordingSubs(tr)
	s1 := &Conn{UserID: "v", sid: "s1"}
	s2 := &Conn{UserID: "v", sid: "s2"}
	ack := subscribeNow(t, s, tr, s1, "h", "w")
	if ack[0].Status != lastseen.StatusHidden || *ack[0].LastSeenBucket != lastseen.BucketLongAgo {
		t.Fatalf("ack of h (never seen, nobody): %+v", ack[0])
	}

	online := presence.Event{Kind: presence.EventStatus, UserID: "h", Status: presence.Online, At: now}
	offline := presence.Event{Kind: presence.EventStatus, UserID: "h", Status: presence.Offline, At: now.Add(time.Minute), LastSeen: now.Add(time.Minute)}
	ctx := context.Background()

	// s2 churns: one subscription caught between its replace and its ack
	// when h comes online, then [] and [h] again around h's offline.
	s.Replace(s2, []string{"h"})
	s.deliverNow(ctx, online)
	seen, _ := tr.Presences(ctx, "v", []string{"h"})
	seed(s2, seen)
	s.Replace(s2, nil)
	s.Replace(s2, []string{"h"})
	s.deliverNow(ctx, offline)
	subscribeNow(t, s, tr, s2, "h")
	s.deliverNow(ctx, online)
	s.Replace(s2, nil)
	s.deliverNow(ctx, offline)
	if g := got(); len(g) != 0 {
		t.Fatalf("presence:update about a hidden user delivered: %+v", g)
	}

	// A visible user: each real change once.
	w1 := presence.Event{Kind: presence.EventStatus, UserID: "w", Status: presence.Online, At: now}
	s.deliverNow(ctx, w1)
	s.deliverNow(ctx, w1)
	g := got()
	if len(g) != 1 || g[0].sid != "s1" || g[0].p.Status != "online" {
		t.Fatalf("visible user's update: %+v", g)
	}
	// h goes visible (everyone): the next change is delivered.
	tr.mu.Lock()
	tr.settings["h"] = store.Everyone
	tr.mu.Unlock()
	s.deliverNow(ctx, online)
	if g := got(); len(g) != 2 || g[1].p.UserID != "h" || g[1].p.Status != "online" {
		t.Fatalf("h visible again: %+v", g)
	}
}

// gatedViewers holds PresencesFor of one user until released, as a slow
// store would, counting the calls that began.
type gatedViewers struct {
	*truth
	user    string
	started chan presence.UserPresence
	release chan struct{}
}

func (g gatedViewers) PresencesFor(ctx context.Context, up presence.UserPresence, viewers []string) ([]lastseen.Presence, error) {
	if up.UserID == g.user {
		g.started <- up
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.truth.PresencesFor(ctx, up, viewers)
}

func gatedSubs(t *testing.T, slowUser string) (*Subscriptions, gatedViewers, func() []emitted) {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := &truth{settings: map[string]store.Visibility{}, now: now}
	g := gatedViewers{truth: tr, user: slowUser, started: make(chan presence.UserPresence, 16), release: make(chan struct{})}
	s, got := recordingSubs(tr)
	s.viewers = g
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s, g, got
}

func statusEvent(user string, st presence.Status, at time.Time) presence.Event {
	e := presence.Event{Kind: presence.EventStatus, UserID: user, Status: st, At: at}
	if st == presence.Offline {
		e.LastSeen = at
	}
	return e
}

func waitEmits(t *testing.T, got func() []emitted, n int, what string) []emitted {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		g := got()
		if len(g) >= n {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d updates after 2s, want %d: %+v", what, len(g), n, g)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A delivery held up by a slow store does not stall the bus's reader nor
// the other users' deliveries (#12 finding 3).
func TestSlowDeliveryDoesNotStallOthers(t *testing.T) {
	s, g, got := gatedSubs(t, "slow")
	v := &Conn{UserID: "v", sid: "s1"}
	subscribeNow(t, s, g.truth, v, "slow", "fast")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	// The bus's reader: it must get through both changes at once.
	read := make(chan struct{})
	go func() {
		s.Deliver(context.Background(), statusEvent("slow", presence.Online, now))
		s.Deliver(context.Background(), statusEvent("fast", presence.Online, now))
		close(read)
	}()
	select {
	case <-read:
	case <-time.After(2 * time.Second):
		close(g.release)
		t.Fatal("the bus's reader is stalled by a slow delivery")
	}
	<-g.started
	if e := waitEmits(t, got, 1, "fast user's update while another's is held"); e[0].p.UserID != "fast" {
		t.Fatalf("first update: %+v", e[0])
	}
	close(g.release)
	waitEmits(t, got, 2, "slow user's update once released")
}

// While a user's change is being delivered, newer changes of that user
// wait, coalesced to the latest, and go out after it: in order, one
// delivery per user at a time.
func TestDeliveryCoalescesByUser(t *testing.T) {
	s, g, got := gatedSubs(t, "u")
	v := &Conn{UserID: "v", sid: "s1"}
	subscribeNow(t, s, g.truth, v, "u")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s.Deliver(context.Background(), statusEvent("u", presence.Online, now))
	first := <-g.started
	s.Deliver(context.Background(), statusEvent("u", presence.Away, now.Add(time.Second)))
	s.Deliver(context.Background(), statusEvent("u", presence.Online, now.Add(2*time.Second)))
	s.Deliver(context.Background(), statusEvent("u", presence.Offline, now.Add(3*time.Second)))
	select {
	case up := <-g.started:
		t.Fatalf("a second delivery of u began while the first ran: %+v", up)
	case <-time.After(50 * time.Millisecond):
	}
	if first.Status != presence.Online {
		t.Fatalf("first delivery: %+v", first)
	}
	go func() {
		for range g.started { // the second delivery: let it through
		}
	}()
	close(g.release)
	waitEmits(t, got, 2, "the first and the latest change")
	time.Sleep(50 * time.Millisecond)
	e := got()
	if len(e) != 2 || e[0].p.Status != "online" || e[1].p.Status != "offline" {
		t.Fatalf("updates %+v, want online then offline", e)
	}
	if c := testCounter(s.queue.coalesced); c != 2 {
		t.Fatalf("coalesced %v, want 2", c)
	}
	close(g.started)
}

// The queue is bounded: beyond MaxQueuedStatus users waiting, a change is
// dropped and counted.
func TestDeliveryQueueBounded(t *testing.T) {
	tr := &truth{settings: map[string]store.Visibility{}}
	s, _ := recordingSubs(tr)
	s.queue.max = 2
	v := &Conn{UserID: "v", sid: "s1"}
	subscribeNow(t, s, tr, v, "a", "b", "c")
	now := time.Now()
	for _, u := range []string{"a", "b", "c", "a"} {
		s.Deliver(context.Background(), statusEvent(u, presence.Online, now)) // no Run: nothing is taken
	}
	if d, c := testCounter(s.queue.dropped), testCounter(s.queue.coalesced); d != 1 || c != 1 {
		t.Fatalf("dropped %v coalesced %v, want 1 and 1", d, c)
	}
}

func testCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// A user who hides is shown hidden to subscribers when the setting
// changes, so that their next status change is not the moment subscribers
// see them go hidden (it would tell when that change happened); and one
// who shows again is shown at once.
func TestPrivacyChangeRefreshesSubscribers(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr := &truth{settings: map[string]store.Visibility{}, now: now}
	tr.users.Set(presence.UserPresence{UserID: "h", Status: presence.Online, Since: now})
	s, got := recordingSubs(tr)
	v := &Conn{UserID: "v", sid: "s1"}
	if ack := subscribeNow(t, s, tr, v, "h"); ack[0].Status != "online" {
		t.Fatalf("ack: %+v", ack)
	}
	ctx := context.Background()
	// setPrivacy changes h's setting and delivers what the change queued.
	setPrivacy := func(v store.Visibility) {
		tr.mu.Lock()
		tr.settings["h"] = v
		tr.mu.Unlock()
		s.Refresh("h")
		if e, ok := s.queue.take(); ok {
			s.deliverNow(ctx, e)
			s.queue.done(e.UserID)
		}
	}
	setPrivacy(store.Nobody)
	if g := got(); len(g) != 1 || g[0].p.Status != lastseen.StatusHidden {
		t.Fatalf("updates %+v, want one hidden, sent at the privacy change", g)
	}
	s.deliverNow(ctx, statusEvent("h", presence.Offline, now.Add(time.Minute)))
	if g := got(); len(g) != 1 {
		t.Fatalf("updates %+v, want none at the hidden user's status change", g)
	}
	setPrivacy(store.Everyone)
	if g := got(); len(g) != 2 || g[1].p.Status != "offline" {
		t.Fatalf("updates %+v, want h shown offline at once", g)
	}
}
