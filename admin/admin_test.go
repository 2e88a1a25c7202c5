package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/admin"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/chantest"
	"github.com/presenced/presenced/internal/logbuf"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

const token = "admin-token-0123456789"

// fakeSockets stands for the socket handlers.
type fakeSockets struct {
	mu            sync.Mutex
	disconnected  []string
	disconnectErr error
	local         map[string][]handlers.LocalSocket
}

func (f *fakeSockets) Open() int64 { return 3 }
func (f *fakeSockets) ClusterSockets(_ context.Context, user string) ([]handlers.LocalSocket, error) {
	return f.local[user], nil
}
func (f *fakeSockets) DisconnectUser(_ context.Context, user string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disconnected = append(f.disconnected, user)
	return f.disconnectErr
}

type fixture struct {
	panel   *admin.Panel
	srv     *httptest.Server
	engine  presence.Engine
	sockets *fakeSockets
	store   store.Store
	reg     *prometheus.Registry
	logs    *logbuf.Buffer // the panel's log, as text
}

// counter reads a counter of the panel's registry.
func (f *fixture) counter(tb testing.TB, name string, labels ...string) float64 {
	tb.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				ok = ok && found
			}
			if ok {
				return m.GetCounter().GetValue()
			}
		}
	}
	tb.Fatalf("no metric %s %v", name, labels)
	return 0
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	return newFixtureWith(tb, presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"}), nil, "")
}

// newFixtureWith serves a panel over eng (an AdminView too) and, when rdb
// is set, a Redis last-seen buffer and cluster stats under prefix.
func newFixtureWith(tb testing.TB, eng presence.Engine, rdb redis.UniversalClient, prefix string) *fixture {
	tb.Helper()
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(tb.TempDir(), "admin.db"), store.SQLiteConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	var buf lastseen.Buffer = lastseen.NewMemory()
	if rdb != nil {
		buf = lastseen.NewRedis(rdb, lastseen.RedisConfig{Prefix: prefix})
	}
	pipe := lastseen.NewPipeline(buf, st, lastseen.Config{})
	fs := &fakeSockets{local: map[string][]handlers.LocalSocket{}}
	reg := prometheus.NewRegistry()
	logs := &logbuf.Buffer{}
	p, err := admin.New(admin.Config{Token: token, NodeID: "n1", Prefix: prefix}, admin.Deps{
		Log: slog.New(slog.NewTextHandler(logs, nil)), Engine: eng, View: eng.(presence.AdminView), Redis: rdb,
		Reader:   lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: st}),
		Pipeline: pipe, Buffer: buf, Store: st, Sockets: fs,
		Ready:    []admin.Check{{Name: "store", Check: st.Ping}},
		Registry: reg,
	})
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", p.Handler()))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return &fixture{panel: p, srv: srv, engine: eng, sockets: fs, store: st, reg: reg, logs: logs}
}

// client returns an HTTP client with a cookie jar that does not follow
// redirects.
func client(tb testing.TB) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) login(tb testing.TB, c *http.Client, tok string) *http.Response {
	tb.Helper()
	return login(tb, f.srv.URL, c, tok)
}

func login(tb testing.TB, base string, c *http.Client, tok string) *http.Response {
	tb.Helper()
	res, err := c.Post(base+"/admin/api/login", "application/json", strings.NewReader(fmt.Sprintf(`{"token":%q}`, tok)))
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

func (f *fixture) session(tb testing.TB) *http.Client {
	tb.Helper()
	return sessionAt(tb, f.srv.URL)
}

// sessionAt returns a client logged in to the panel at base.
func sessionAt(tb testing.TB, base string) *http.Client {
	tb.Helper()
	c := client(tb)
	if res := login(tb, base, c, token); res.StatusCode != http.StatusNoContent {
		tb.Fatalf("login: %d", res.StatusCode)
	}
	return c
}

func getJSON(tb testing.TB, c *http.Client, url string, into any) int {
	tb.Helper()
	res, err := c.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	if into != nil && res.StatusCode == http.StatusOK {
		if err := json.NewDecoder(res.Body).Decode(into); err != nil {
			tb.Fatal(err)
		}
	}
	return res.StatusCode
}

// apiRoutes are every route of /admin/api/ that needs a session.
var apiRoutes = []struct{ method, path string }{
	{"GET", "/admin/api/session"},
	{"GET", "/admin/api/openapi.json"},
	{"GET", "/admin/api/stream?view=cluster"},
	{"GET", "/admin/api/cluster"},
	{"GET", "/admin/api/conversations"},
	{"GET", "/admin/api/conversation?id=c1"},
	{"GET", "/admin/api/user?id=u1"},
	{"GET", "/admin/api/lastseen"},
	{"GET", "/admin/api/health"},
	{"POST", "/admin/api/users/disconnect"},
	{"GET", "/admin/api/no-such-route"},
}

func TestAPIRefusesWithoutSession(t *testing.T) {
	f := newFixture(t)
	forged := &http.Cookie{Name: "presenced_admin", Value: "9999999999.abcd.forged"}
	for _, rt := range apiRoutes {
		for _, cookie := range []*http.Cookie{nil, forged} {
			req, _ := http.NewRequest(rt.method, f.srv.URL+rt.path, strings.NewReader(`{"userId":"u1","reason":"x"}`))
			if cookie != nil {
				req.AddCookie(cookie)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s (cookie %v): got %d, want 401", rt.method, rt.path, cookie != nil, res.StatusCode)
			}
			if res.Header.Get("Content-Security-Policy") == "" {
				t.Errorf("%s %s: no Content-Security-Policy", rt.method, rt.path)
			}
		}
	}
	if len(f.sockets.disconnected) != 0 {
		t.Errorf("disconnected without a session: %v", f.sockets.disconnected)
	}
}

func TestLogin(t *testing.T) {
	f := newFixture(t)
	c := client(t)
	if res := f.login(t, c, "wrong-token-xxxxxxxxxx"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", res.StatusCode)
	}
	if code := getJSON(t, c, f.srv.URL+"/admin/api/cluster", nil); code != http.StatusUnauthorized {
		t.Fatalf("after a wrong token: %d", code)
	}
	res := f.login(t, c, token)
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("right token: %d", res.StatusCode)
	}
	var ck *http.Cookie
	for _, k := range res.Cookies() {
		if k.Name == "presenced_admin" {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict", ck)
	}
	if code := getJSON(t, c, f.srv.URL+"/admin/api/cluster", nil); code != http.StatusOK {
		t.Fatalf("with a session: %d", code)
	}

	t.Run("form", func(t *testing.T) {
		c := client(t)
		res, err := c.PostForm(f.srv.URL+"/admin/login", map[string][]string{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/" {
			t.Fatalf("form login: %d → %s", res.StatusCode, res.Header.Get("Location"))
		}
		res, err = c.Get(f.srv.URL + "/admin/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "app.js") {
			t.Fatalf("index: %d %.80s", res.StatusCode, body)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Fatalf("CSP %q", csp)
		}
	})

	t.Run("cross-origin login refused", func(t *testing.T) {
		req, _ := http.NewRequest("POST", f.srv.URL+"/admin/api/login", strings.NewReader(`{"token":"`+token+`"}`))
		req.Header.Set("Origin", "https://evil.example")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("got %d", res.StatusCode)
		}
		if n := f.logs.Count("admin login refused", "reason=cross-origin", "evil.example"); n != 1 {
			t.Errorf("%d log lines of the cross-origin refusal, want 1", n)
		}
	})
}

func TestLoginRateLimited(t *testing.T) {
	f := newFixture(t)
	c := client(t)
	for i := range 5 {
		if res := f.login(t, c, fmt.Sprintf("wrong-%d-xxxxxxxxxxxxxx", i)); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, res.StatusCode)
		}
	}
	res := f.login(t, c, "wrong-again-xxxxxxxxxxx")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("6th wrong token: %d (Retry-After %q)", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// even the right token waits: a guesser learns nothing more
	if res := f.login(t, c, token); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("right token while limited: %d", res.StatusCode)
	}
	if got := f.counter(t, "presenced_admin_logins_total", "outcome", "wrong_token"); got != 5 {
		t.Errorf("wrong_token logins: %v", got)
	}
	if got := f.counter(t, "presenced_admin_logins_total", "outcome", "rate_limited"); got != 2 {
		t.Errorf("rate_limited logins: %v", got)
	}
	// each wrong token is logged, and the block once, not each refusal in it
	if n := f.logs.Count("admin login refused", `reason="wrong token"`); n != 5 {
		t.Errorf("%d log lines of wrong tokens, want 5", n)
	}
	if n := f.logs.Count("refused until its window passes"); n != 1 {
		t.Errorf("%d log lines of the block, want 1", n)
	}
}

func TestViews(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	e := f.engine
	for i, u := range []string{"alice", "bob", "carol"} {
		sid := "s-" + u
		if err := e.Connect(ctx, presence.Socket{ID: sid, UserID: u}); err != nil {
			t.Fatal(err)
		}
		for _, conv := range []string{"team-a", "team-b", "other"}[:i+1] {
			if _, err := e.Join(ctx, sid, conv); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.TypingStart(ctx, "s-bob", "team-a"); err != nil {
		t.Fatal(err)
	}
	f.sockets.local["alice"] = []handlers.LocalSocket{{ID: "s-alice", Node: "n1", Transport: "websocket", Subscriptions: 2}}
	if err := f.store.SetPrivacy(ctx, "alice", store.Nobody); err != nil {
		t.Fatal(err)
	}
	c := f.session(t)
	base := f.srv.URL + "/admin/api/"

	var cl struct {
		Nodes []struct {
			Node       string `json:"node"`
			Self       bool   `json:"self"`
			Sockets    int64  `json:"sockets"`
			LeaseAgeMs *int64 `json:"leaseAgeMs"`
		} `json:"nodes"`
	}
	if code := getJSON(t, c, base+"cluster", &cl); code != 200 || len(cl.Nodes) != 1 || cl.Nodes[0].Node != "n1" || !cl.Nodes[0].Self || cl.Nodes[0].Sockets != 3 || cl.Nodes[0].LeaseAgeMs == nil {
		t.Fatalf("cluster %d %+v", code, cl)
	}

	type convs struct {
		Total int `json:"total"`
		Rows  []struct {
			ID      string   `json:"id"`
			Online  int      `json:"online"`
			Members []string `json:"members"`
			Typing  []string `json:"typing"`
		} `json:"rows"`
	}
	var cv convs
	if code := getJSON(t, c, base+"conversations", &cv); code != 200 || cv.Total != 3 || len(cv.Rows) != 3 {
		t.Fatalf("conversations %d %+v", code, cv)
	}
	if r := cv.Rows[0]; r.ID != "team-a" || r.Online != 3 || len(r.Members) != 3 || len(r.Typing) != 1 || r.Typing[0] != "bob" {
		t.Fatalf("busiest %+v", r)
	}
	if got := []string{cv.Rows[1].ID, cv.Rows[2].ID}; got[0] != "team-b" || got[1] != "other" {
		t.Fatalf("order %v", got)
	}
	cv = convs{}
	if code := getJSON(t, c, base+"conversations?q=team&limit=1&page=2", &cv); code != 200 || cv.Total != 2 || len(cv.Rows) != 1 || cv.Rows[0].ID != "team-b" {
		t.Fatalf("search and page %d %+v", code, cv)
	}
	for _, bad := range []string{"limit=101", "limit=0", "page=0", "page=x"} {
		if code := getJSON(t, c, base+"conversations?"+bad, nil); code != 400 {
			t.Errorf("conversations?%s: %d, want 400", bad, code)
		}
	}

	var roster struct {
		Online  int `json:"online"`
		Members []struct {
			UserID string  `json:"userId"`
			Since  *string `json:"since"`
			Typing bool    `json:"typing"`
		} `json:"members"`
	}
	if code := getJSON(t, c, base+"conversation?id=team-a&limit=2", &roster); code != 200 || roster.Online != 3 || len(roster.Members) != 2 || roster.Members[0].Since == nil {
		t.Fatalf("roster %d %+v", code, roster)
	}

	var user struct {
		Status      string `json:"status"`
		Privacy     string `json:"privacy"`
		Connections []struct {
			ID, Node, Transport string
			Conversations       []string
		} `json:"connections"`
		Conversations []string `json:"conversations"`
		Subscriptions int      `json:"subscriptions"`
	}
	if code := getJSON(t, c, base+"user?id=alice", &user); code != 200 || user.Status != "online" || user.Privacy != "nobody" ||
		len(user.Connections) != 1 || user.Connections[0].Node != "n1" || user.Connections[0].Transport != "websocket" ||
		len(user.Conversations) != 1 || user.Subscriptions != 2 {
		t.Fatalf("user %d %+v", code, user)
	}
	if code := getJSON(t, c, base+"user?id=", nil); code != 400 {
		t.Fatalf("empty user id: %d", code)
	}

	var ls map[string]any
	if code := getJSON(t, c, base+"lastseen", &ls); code != 200 {
		t.Fatalf("lastseen %d", code)
	}
	if _, ok := ls["dirty"]; !ok {
		t.Fatalf("lastseen %v", ls)
	}
	var h struct {
		Status string `json:"status"`
	}
	if code := getJSON(t, c, base+"health", &h); code != 200 || h.Status != "ok" {
		t.Fatalf("health %d %+v", code, h)
	}
}

func TestDisconnectNeedsCSRF(t *testing.T) {
	f := newFixture(t)
	c := f.session(t)
	post := func(csrf, body string) int {
		req, _ := http.NewRequest("POST", f.srv.URL+"/admin/api/users/disconnect", strings.NewReader(body))
		if csrf != "" {
			req.Header.Set("X-CSRF-Token", csrf)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post("", `{"userId":"alice","reason":"test"}`); code != http.StatusForbidden {
		t.Fatalf("without CSRF token: %d", code)
	}
	if code := post("forged", `{"userId":"alice","reason":"test"}`); code != http.StatusForbidden {
		t.Fatalf("wrong CSRF token: %d", code)
	}
	var s struct {
		CSRF string `json:"csrf"`
	}
	getJSON(t, c, f.srv.URL+"/admin/api/session", &s)
	if code := post(s.CSRF, `{"userId":"alice"}`); code != http.StatusBadRequest {
		t.Fatalf("without a reason: %d", code)
	}
	if len(f.sockets.disconnected) != 0 {
		t.Fatalf("refused requests disconnected %v", f.sockets.disconnected)
	}
	if code := post(s.CSRF, `{"userId":"alice","reason":"abuse report 42"}`); code != http.StatusOK {
		t.Fatalf("with CSRF token: %d", code)
	}
	if len(f.sockets.disconnected) != 1 || f.sockets.disconnected[0] != "alice" {
		t.Fatalf("disconnected %v", f.sockets.disconnected)
	}
	if got := f.counter(t, "presenced_admin_disconnects_total"); got != 1 {
		t.Fatalf("presenced_admin_disconnects_total %v", got)
	}
	// a node that did not confirm it: the operator is told to try again
	f.sockets.mu.Lock()
	f.sockets.disconnectErr = errors.New("adapter: not every node is subscribed: 1 of them not subscribed")
	f.sockets.mu.Unlock()
	if code := post(s.CSRF, `{"userId":"alice","reason":"abuse report 42"}`); code != http.StatusServiceUnavailable {
		t.Fatalf("a disconnect not every node confirmed: %d, want 503", code)
	}
}

func TestStream(t *testing.T) {
	f := newFixture(t)
	c := f.session(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/admin/api/stream?view=cluster", nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	buf := make([]byte, 4096)
	n, _ := io.ReadAtLeast(res.Body, buf, 20)
	if !strings.HasPrefix(string(buf[:n]), "event: update\ndata: {") {
		t.Fatalf("first event %q", buf[:n])
	}
	// shutdown ends the stream (else the HTTP server's Shutdown waits)
	f.panel.EndStreams()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, res.Body); done <- err }()
	chantest.NoError(t, done, 2*time.Second, "the stream's end after EndStreams")
}

func decodeInto(tb testing.TB, res *http.Response, into any) {
	tb.Helper()
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(into); err != nil {
		tb.Fatal(err)
	}
}

// TestRedisDown: with Redis unreachable the pages still answer, naming
// what fails (health, the cluster view's warnings).
func TestRedisDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	f := newFixtureWith(t, presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"}), rdb, "down")
	c := f.session(t)
	var cl struct {
		Nodes    []struct{ Node string } `json:"nodes"`
		Warnings []string                `json:"warnings"`
	}
	if code := getJSON(t, c, f.srv.URL+"/admin/api/cluster", &cl); code != 200 || len(cl.Nodes) != 1 || len(cl.Warnings) == 0 {
		t.Fatalf("cluster %d %+v", code, cl)
	}
	var ls map[string]any
	if code := getJSON(t, c, f.srv.URL+"/admin/api/lastseen", &ls); code != 200 || ls["bufferError"] == nil {
		t.Fatalf("lastseen %d %v", code, ls)
	}
}

// A wrong method on a page answers with the page's methods, not every
// method of the /admin mount (an audit: PUT /admin/ listed PUT itself).
func TestPageMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	for path, want := range map[string]string{"/admin/": "GET", "/admin/login": "GET, POST"} {
		req, _ := http.NewRequest("PUT", f.srv.URL+path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != want {
			t.Errorf("PUT %s: %d, Allow %q; want 405, %q", path, res.StatusCode, res.Header.Get("Allow"), want)
		}
	}
}

// sessionCookie returns the session cookie value the client c holds for
// the panel at base.
func sessionCookie(tb testing.TB, c *http.Client, base string) string {
	tb.Helper()
	u, _ := url.Parse(base + "/admin/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == "presenced_admin" {
			return k.Value
		}
	}
	tb.Fatal("no session cookie")
	return ""
}

// withCookie requests method path at base with the session cookie v (a
// copy, outside the browser that logged out) and returns the status.
func withCookie(tb testing.TB, base, method, path, v string) int {
	tb.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	req.AddCookie(&http.Cookie{Name: "presenced_admin", Value: v})
	c := client(tb)
	c.Timeout = 10 * time.Second
	res, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	res.Body.Close() // (a stream that was let in would not end)
	return res.StatusCode
}

func logout(tb testing.TB, c *http.Client, base string) {
	tb.Helper()
	res, err := c.Post(base+"/admin/logout", "", nil)
	if err != nil {
		tb.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		tb.Fatalf("logout: %d", res.StatusCode)
	}
}

// A logout ends the session itself, not only the browser's cookie: a copy
// taken before no longer opens the API, the page or a stream (an audit:
// it stayed valid for its 12 h). Another session stays.
func TestLogoutEndsTheSession(t *testing.T) {
	f := newFixture(t)
	c, other := f.session(t), f.session(t)
	v := sessionCookie(t, c, f.srv.URL)
	if code := withCookie(t, f.srv.URL, "GET", "/admin/api/cluster", v); code != http.StatusOK {
		t.Fatalf("the copy before the logout: %d", code)
	}
	logout(t, c, f.srv.URL)
	for _, path := range []string{"/admin/api/cluster", "/admin/api/session", "/admin/api/stream?view=cluster"} {
		if code := withCookie(t, f.srv.URL, "GET", path, v); code != http.StatusUnauthorized {
			t.Errorf("%s with the copy after the logout: %d, want 401", path, code)
		}
	}
	if code := withCookie(t, f.srv.URL, "GET", "/admin/", v); code != http.StatusSeeOther {
		t.Errorf("the page with the copy after the logout: %d, want 303 to the login", code)
	}
	if code := getJSON(t, other, f.srv.URL+"/admin/api/cluster", nil); code != http.StatusOK {
		t.Errorf("another session after the logout: %d", code)
	}
}

// In a cluster a logout through one node ends the session on the others
// (within revokedRecheck), and with Redis down it still ends it on the
// node that served it.
func TestLogoutEndsTheSessionOnEveryNode(t *testing.T) {
	rdb, prefix := testRedis(t)
	newNode := func() *fixture {
		return newFixtureWith(t, presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"}), rdb, prefix)
	}
	f1, f2 := newNode(), newNode()
	c := f1.session(t)
	v := sessionCookie(t, c, f1.srv.URL)
	if code := withCookie(t, f2.srv.URL, "GET", "/admin/api/cluster", v); code != http.StatusOK {
		t.Fatalf("the session on the other node: %d", code)
	}
	logout(t, c, f1.srv.URL)
	deadline := time.Now().Add(5 * time.Second)
	for withCookie(t, f2.srv.URL, "GET", "/admin/api/cluster", v) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("the session still opens the other node 5 s after the logout")
		}
		time.Sleep(100 * time.Millisecond)
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	f := newFixtureWith(t, presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1"}), down, "down")
	c = f.session(t)
	v = sessionCookie(t, c, f.srv.URL)
	logout(t, c, f.srv.URL)
	if code := withCookie(t, f.srv.URL, "GET", "/admin/api/cluster", v); code != http.StatusUnauthorized {
		t.Errorf("with Redis down, the copy on the node that logged out: %d", code)
	}
	if n := f.logs.Count("admin logout not recorded in Redis"); n != 1 {
		t.Errorf("%d log lines of the logout Redis did not take, want 1", n)
	}
}
