package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/server"
)

// heldJoin is an engine whose Join waits for release.
type heldJoin struct {
	presence.Engine
	entered, release chan struct{}
}

// heldServer is a test server whose engine's joins wait for release.
func heldServer(t *testing.T) (*heldJoin, *testServer) {
	held := &heldJoin{entered: make(chan struct{}, 1), release: make(chan struct{})}
	ts := newTestServerEngine(t, server.Config{}, handlers.SessionConfig{NodeID: "n1"}, func(e presence.Engine) presence.Engine {
		held.Engine = e
		return held
	})
	return held, ts
}

// heartbeats is a polling payload of n heartbeat events, with ack ids
// from first on.
func heartbeats(n, first int) string {
	packets := make([]string, n)
	for i := range packets {
		packets[i] = fmt.Sprintf(`42%d["heartbeat",{}]`, first+i)
	}
	return strings.Join(packets, "\x1e")
}

func (h *heldJoin) Join(ctx context.Context, sid, conv string) (presence.JoinResult, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.Engine.Join(ctx, sid, conv)
}

// A long-polling POST's packets are handed to the library transport.MaxQueued
// at a time, each group once the socket's queue is below the bound, as
// websocket messages are: a POST of 200 events behind a held join is not
// answered until the join is done, and then every event is, in order.
// Before 2026-12-07 the bound counted a POST as one message: all its
// packets (up to 12,500 tiny events in 100 KiB) were decoded and queued at
// once, and one user's 20 polling sockets took a node from 70 MB to 690 MB
// (a black-box audit).
func TestPollingPostQueuedInGroups(t *testing.T) {
	held, ts := heldServer(t)
	u := pollingSocket(t, ts, "poster")
	if resp, body := do(t, "POST", u, `421["conversation:join",{"conversationId":"c1"}]`, nil); resp.StatusCode != 200 {
		t.Fatalf("join: %d %q", resp.StatusCode, body)
	}
	select {
	case <-held.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the join did not reach the engine")
	}
	const events = 200
	payload := heartbeats(events, 2)
	answered := make(chan string, 1)
	go func() {
		resp, body := do(t, "POST", u, payload, nil)
		answered <- fmt.Sprint(resp.StatusCode, " ", body)
	}()
	select {
	case got := <-answered:
		t.Fatalf("the POST was answered (%s) while the queue ahead of it was full", got)
	case <-time.After(300 * time.Millisecond):
	}
	close(held.release)
	select {
	case got := <-answered:
		if got != "200 ok" {
			t.Fatalf("the POST: %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the POST was not answered once the join was done")
	}
	var acks []string
	for deadline := time.Now().Add(10 * time.Second); len(acks) < events+1 && time.Now().Before(deadline); {
		_, body := do(t, "GET", u, "", nil)
		for _, p := range strings.Split(body, "\x1e") {
			if strings.HasPrefix(p, "43") {
				acks = append(acks, p)
			}
		}
	}
	if len(acks) != events+1 {
		t.Fatalf("%d acks, want %d", len(acks), events+1)
	}
	for i, a := range acks {
		if !strings.HasPrefix(a, fmt.Sprintf("43%d[", i+1)) {
			t.Fatalf("ack %d: %.60s", i, a)
		}
	}
}

// A polling payload splits into groups of n packets.
func TestSplitPayload(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want []string
	}{
		{"a", 2, []string{"a"}},
		{"a\x1eb", 2, []string{"a\x1eb"}},
		{"a\x1eb\x1ec", 2, []string{"a\x1eb", "c"}},
		{"a\x1eb\x1ec\x1ed", 2, []string{"a\x1eb", "c\x1ed"}},
		{"a\x1eb\x1ec", 1, []string{"a", "b", "c"}},
	} {
		groups, sizes := server.SplitPayload([]byte(tc.in), tc.n)
		var got []string
		total := 0
		for i, g := range groups {
			got = append(got, string(g))
			if sizes[i] != strings.Count(string(g), "\x1e")+1 {
				t.Errorf("%q: group %q counted %d", tc.in, g, sizes[i])
			}
			total += sizes[i]
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || total != strings.Count(tc.in, "\x1e")+1 {
			t.Errorf("%q by %d: %q %v, want %q", tc.in, tc.n, got, sizes, tc.want)
		}
	}
}

// A long-polling POST whose CLOSE comes in its first group of packets is
// answered 200 "ok", as Engine.IO answers it, and the session is gone;
// the packets after the CLOSE are dropped.
func TestPollingPostClosedMidway(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	u := pollingSocket(t, ts, "closer")
	packets := make([]string, 40)
	for i := range packets {
		packets[i] = fmt.Sprintf(`42%d["heartbeat",{}]`, i+1)
	}
	packets[5] = "1"
	if resp, body := do(t, "POST", u, strings.Join(packets, "\x1e"), nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("POST: %d %q, want 200 ok", resp.StatusCode, body)
	}
	waitFor(t, func() bool { return ts.Sockets.Open() == 0 }, "the socket disconnected")
	if resp, body := do(t, "GET", u, "", nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("GET after the CLOSE: %d %q, want the session gone", resp.StatusCode, body)
	}
}

// An upgrade to websocket while a long-polling POST is still being handed
// on in groups waits for the POST: every packet of it is handled, and
// every ack arrives, in order, on either transport. Before, the groups
// after the upgrade were refused by the closed polling transport and lost
// (a black-box audit, 2026-12-07: 1,000 of 8,000 events handled).
func TestPollingPostHandedWholeBeforeAnUpgrade(t *testing.T) {
	held, ts := heldServer(t)
	u := pollingSocket(t, ts, "upgrader")
	sid := u[strings.LastIndex(u, "sid=")+4:]
	var mu sync.Mutex
	var polled, pushed []string // acks by polling, then on the websocket
	note := func(to *[]string, p string) {
		if strings.HasPrefix(p, "43") {
			mu.Lock()
			*to = append(*to, p)
			mu.Unlock()
		}
	}
	go func() { // the client's polls, until the session leaves polling
		for {
			resp, err := http.Get(u)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 {
				return
			}
			for _, p := range strings.Split(string(body), "\x1e") {
				note(&polled, p)
			}
		}
	}()
	if resp, body := do(t, "POST", u, `421["conversation:join",{"conversationId":"c1"}]`, nil); resp.StatusCode != 200 {
		t.Fatalf("join: %d %q", resp.StatusCode, body)
	}
	<-held.entered
	const events = 200
	payload := heartbeats(events, 2)
	answered := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", u, strings.NewReader(payload))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		answered <- fmt.Sprint(resp.StatusCode, " ", string(body))
	}()
	time.Sleep(100 * time.Millisecond) // its first group is in, the rest waits
	conn := upgrade(t, ts, sid, 10*time.Second)
	defer conn.Close()
	time.Sleep(100 * time.Millisecond)
	close(held.release)
	if got := <-answered; got != "200 ok" {
		t.Fatalf("the POST: %s", got)
	}
	go func() { // and on the websocket once upgraded
		for {
			_, m, err := conn.ReadMessage()
			if err != nil {
				return
			}
			note(&pushed, string(m))
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(polled) + len(pushed) }
	for deadline := time.Now().Add(10 * time.Second); count() < events+1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d acks, want %d", count(), events+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, a := range append(polled, pushed...) {
		if !strings.HasPrefix(a, fmt.Sprintf("43%d[", i+1)) {
			t.Fatalf("ack %d: %.60s", i, a)
		}
	}
}
