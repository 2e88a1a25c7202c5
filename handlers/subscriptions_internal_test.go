package handlers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// truth is a Viewers over users' true presence and settings, filtered by
// lastseen.Filter as the real reader does.
type truth struct {
	mu       sync.Mutex
	users    map[string]presence.UserPresence
	settings map[string]store.Visibility
	now      time.Time
}

func (tr *truth) filter(viewer string, up presence.UserPresence) lastseen.Presence {
	return lastseen.Filter(viewer, lastseen.Target{
		UserID: up.UserID, Status: up.Status, LastSeen: up.LastSeen, Setting: tr.settings[up.UserID],
	}, tr.settings[viewer], tr.now)
}

func (tr *truth) Presences(_ context.Context, viewer string, ids []string) ([]lastseen.Presence, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]lastseen.Presence, len(ids))
	for i, id := range ids {
		up, ok := tr.users[id]
		if !ok {
			up = presence.UserPresence{UserID: id, Status: presence.Offline}
		}
		out[i] = tr.filter(viewer, up)
	}
	return out, nil
}

func (tr *truth) PresencesFor(_ context.Context, up presence.UserPresence, viewers []string) ([]lastseen.Presence, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.users[up.UserID] = up
	out := make([]lastseen.Presence, len(viewers))
	for i, v := range viewers {
		out[i] = tr.filter(v, up)
	}
	return out, nil
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
	tr := &truth{users: map[string]presence.UserPresence{}, settings: map[string]store.Visibility{"h": store.Nobody}, now: now}
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
	s.Deliver(ctx, online)
	seed(s2, []lastseen.Presence{tr.filter("v", tr.users["h"])})
	s.Replace(s2, nil)
	s.Replace(s2, []string{"h"})
	s.Deliver(ctx, offline)
	subscribeNow(t, s, tr, s2, "h")
	s.Deliver(ctx, online)
	s.Replace(s2, nil)
	s.Deliver(ctx, offline)
	if g := got(); len(g) != 0 {
		t.Fatalf("presence:update about a hidden user delivered: %+v", g)
	}

	// A visible user: each real change once.
	w1 := presence.Event{Kind: presence.EventStatus, UserID: "w", Status: presence.Online, At: now}
	s.Deliver(ctx, w1)
	s.Deliver(ctx, w1)
	g := got()
	if len(g) != 1 || g[0].sid != "s1" || g[0].p.Status != "online" {
		t.Fatalf("visible user's update: %+v", g)
	}
	// h goes visible (everyone): the next change is delivered.
	tr.mu.Lock()
	tr.settings["h"] = store.Everyone
	tr.mu.Unlock()
	s.Deliver(ctx, online)
	if g := got(); len(g) != 2 || g[1].p.UserID != "h" || g[1].p.Status != "online" {
		t.Fatalf("h visible again: %+v", g)
	}
}
