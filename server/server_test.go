package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/chantest"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/server"
)

const secret = "0123456789abcdef-test"

type testServer struct {
	*server.Server
	URL     string
	Metrics *metrics.Metrics
	Sockets *handlers.Sockets
}

func newTestServer(tb testing.TB, cfg server.Config, ready ...server.Check) *testServer {
	tb.Helper()
	return newTestServerWith(tb, cfg, handlers.SessionConfig{NodeID: "n1"}, ready...)
}

func newTestServerWith(tb testing.TB, cfg server.Config, scfg handlers.SessionConfig, ready ...server.Check) *testServer {
	tb.Helper()
	return newTestServerEngine(tb, cfg, scfg, nil, ready...)
}

// newTestServerEngine is newTestServerWith whose node's memory engine is
// wrapped by wrap (nil: none).
func newTestServerEngine(tb testing.TB, cfg server.Config, scfg handlers.SessionConfig, wrap func(presence.Engine) presence.Engine, ready ...server.Check) *testServer {
	tb.Helper()
	return newTestServerAPI(tb, cfg, scfg, wrap, nil, ready...)
}

// newTestServerAPI is newTestServerEngine with api as the REST API (/v1;
// nil: none).
func newTestServerAPI(tb testing.TB, cfg server.Config, scfg handlers.SessionConfig, wrap func(presence.Engine) presence.Engine, api http.Handler, ready ...server.Check) *testServer {
	tb.Helper()
	v, err := auth.NewHS256([]byte(secret))
	if err != nil {
		tb.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	sockets := newSocketsEngine(m, scfg, wrap)
	srv, err := server.New(cfg, server.Deps{Log: log, Metrics: m, Verifier: v, Sockets: sockets, Ready: ready, API: api})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		srv.IO().Close(nil)
		hs.Close()
	})
	return &testServer{Server: srv, URL: hs.URL, Metrics: m, Sockets: sockets}
}

func newSockets(m *metrics.Metrics) *handlers.Sockets {
	return newSocketsWith(m, handlers.SessionConfig{NodeID: "n1"})
}

func newSocketsWith(m *metrics.Metrics, scfg handlers.SessionConfig) *handlers.Sockets {
	return newSocketsEngine(m, scfg, nil)
}

func newSocketsEngine(m *metrics.Metrics, scfg handlers.SessionConfig, wrap func(presence.Engine) presence.Engine) *handlers.Sockets {
	log := slog.New(slog.DiscardHandler)
	rooms := handlers.NewRooms(0, log)
	var engine presence.Engine = presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Sink: rooms.Sink()})
	if wrap != nil {
		engine = wrap(engine)
	}
	return handlers.NewSockets(scfg, handlers.SocketDeps{
		Log: log, Metrics: m, Engine: engine, Rooms: rooms,
	})
}

func mint(tb testing.TB, user string) string {
	tb.Helper()
	t, err := auth.SignHS256([]byte(secret), user, time.Hour, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func do(tb testing.TB, method, url, body string, header map[string]string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

// handshake opens an Engine.IO polling session and returns its sid.
func handshake(tb testing.TB, base string, header map[string]string) string {
	tb.Helper()
	resp, body := do(tb, "GET", base+"/socket.io/?EIO=4&transport=polling", "", header)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "0") {
		tb.Fatalf("handshake: %d %q", resp.StatusCode, body)
	}
	var open struct{ Sid string }
	if err := json.Unmarshal([]byte(body[1:]), &open); err != nil || open.Sid == "" {
		tb.Fatalf("handshake body %q: %v", body, err)
	}
	return open.Sid
}

// connectPolling performs the Socket.IO CONNECT over long-polling with the
// given auth payload and returns what the server sent back.
func connectPolling(tb testing.TB, base, authJSON string) string {
	tb.Helper()
	sid := handshake(tb, base, nil)
	u := base + "/socket.io/?EIO=4&transport=polling&sid=" + sid
	if resp, body := do(tb, "POST", u, "40"+authJSON, nil); resp.StatusCode != 200 {
		tb.Fatalf("connect post: %d %q", resp.StatusCode, body)
	}
	var got string
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(got, "session") && !hasPacket(got, "44") {
		_, body := do(tb, "GET", u, "", nil)
		got += body + "\x1e"
	}
	return got
}

// hasPacket reports whether a polling payload (packets separated by 0x1e)
// has a packet that starts with prefix (a CONNECT_ERROR is "44": a sid in
// the CONNECT reply may hold those characters too).
func hasPacket(payload, prefix string) bool {
	for _, p := range strings.Split(payload, "\x1e") {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

func TestSocketIOConnectOverPolling(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	got := connectPolling(t, ts.URL, `{"token":"`+mint(t, "alice")+`"}`)
	if !strings.Contains(got, `42["session",{"userId":"alice"`) {
		t.Fatalf("no session event in %q", got)
	}
	if !strings.Contains(got, `"node":"n1"`) || !strings.Contains(got, `"heartbeat":{"intervalMs":15000,"jitterMs":5000}`) || !strings.Contains(got, `"typingTtlMs":5000`) {
		t.Errorf("session payload: %q", got)
	}
	if v := testutil.ToFloat64(ts.Metrics.SocketsConnected); v != 1 {
		t.Errorf("sockets connected: got %v, want 1", v)
	}
	if v := testutil.ToFloat64(ts.Metrics.Handshakes.WithLabelValues(metrics.HandshakeOK)); v != 1 {
		t.Errorf("handshakes ok: got %v, want 1", v)
	}
}

// The token is not kept in the socket's handshake once verified; the rest
// of the client's auth is.
func TestHandshakeDropsToken(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	connectPolling(t, ts.URL, `{"token":"`+mint(t, "alice")+`","device":"phone"}`)
	ws := dialWS(t, ts.URL, mint(t, "bob"))
	defer ws.conn.Close()
	auths := map[string]map[string]any{}
	ts.Server.IO().Sockets().Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
		c, _ := s.Data().(*handlers.Conn)
		if c != nil {
			auths[c.UserID] = s.Handshake().Auth
		}
		return true
	})
	if len(auths) != 2 || auths["bob"] != nil || len(auths["alice"]) != 1 || auths["alice"]["device"] != "phone" {
		t.Fatalf("handshake auth kept: %v; want alice's device only", auths)
	}
}

// Once a websocket's Socket.IO session has begun, the engine no longer
// holds the upgrade's request (transport.ReleaseRequest): the handshake
// keeps its copy and events still flow. A polling connection keeps its
// request.
func TestReleaseRequest(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	connectPolling(t, ts.URL, `{"token":"`+mint(t, "polly")+`"}`)
	c := dialWSWith(t, ts.URL, mint(t, "wes"), "", http.Header{"Origin": {ts.URL}})
	defer c.conn.Close()
	if n := ts.Sockets.Open(); n != 2 { // after this, the released request is seen
		t.Fatalf("open sockets: %d", n)
	}
	conns := map[string]*socket.Socket{}
	ts.IO().Of("/", nil).Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
		if hc, _ := s.Data().(*handlers.Conn); hc != nil {
			conns[hc.UserID] = s
		}
		return true
	})
	wes, polly := conns["wes"], conns["polly"]
	if wes == nil || polly == nil {
		t.Fatalf("sockets on the server: %v", conns)
	}
	if o := wes.Conn().Request().Headers().Peek("Origin"); o != "" {
		t.Errorf("the websocket's engine connection still holds its request (Origin %q)", o)
	}
	if !wes.Handshake().Xdomain || wes.Handshake().Query["EIO"] == nil {
		t.Errorf("the handshake lost what it copied: %+v", wes.Handshake())
	}
	if polly.Conn().Request().Query().Peek("EIO") != "4" {
		t.Errorf("the polling connection lost its request")
	}
	// both sockets got our lean emitter before anything listened on them
	for _, s := range []*socket.Socket{wes, polly} {
		if got := fmt.Sprintf("%T", s.StrictEventEmitter.EventEmitter); got != "*transport.emitter" {
			t.Errorf("socket %s's emitter is a %s, want ours", s.Id(), got)
		}
	}
	// the websocket's engine connection and its upgraded connection are on
	// our emitters too, adopted once the engine's initialization was done
	// (transport/adopt.go); the polling one keeps the library's
	if got := embeddedEmitter(reflect.ValueOf(wes.Conn())); got != "*transport.emitter" {
		t.Errorf("the websocket's engine connection has a %s emitter, want ours", got)
	}
	if got := embeddedEmitter(reflect.ValueOf(wes.Conn().Transport()).Elem().FieldByName("conn")); got != "*transport.emitter" {
		t.Errorf("the upgraded websocket connection has a %s emitter, want ours", got)
	}
	if got := embeddedEmitter(reflect.ValueOf(polly.Conn())); got != "*types.emmiter" {
		t.Errorf("the polling engine connection has a %s emitter, want the library's", got)
	}
	if got := c.call(t, "heartbeat", `{"active":true}`); !strings.Contains(string(got), `"nextInMs"`) {
		t.Fatalf("heartbeat ack after the release: %s", got)
	}
	// gorilla's Conn is gone too: the transport answers a PING and a
	// CLOSE itself, and the socket goes
	if pongs, code := c.pingThenClose(t); len(pongs) != 1 || pongs[0] != "hi" || code != 1000 {
		t.Errorf("PONGs %q and CLOSE %d after the client's PING and CLOSE; want [hi] and 1000", pongs, code)
	}
	deadline := time.Now().Add(3 * time.Second)
	for ts.Sockets.Open() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ts.Sockets.Open(); n != 1 {
		t.Errorf("open sockets after the CLOSE: %d, want 1 (polly's)", n)
	}
}

func TestSocketIORefusesBadTokens(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	tests := []struct{ name, auth, reason string }{
		{"no auth", ``, "missing token"},
		{"token not a string", `{"token":42}`, "missing token"},
		{"garbage", `{"token":"garbage"}`, "malformed token"},
		{"wrong key", `{"token":"` + func() string {
			tok, _ := auth.SignHS256([]byte("another-secret-0123456"), "bob", time.Hour, time.Now())
			return tok
		}() + `"}`, "invalid signature"},
		{"expired", `{"token":"` + func() string {
			tok, _ := auth.SignHS256([]byte(secret), "bob", time.Minute, time.Now().Add(-time.Hour))
			return tok
		}() + `"}`, "token expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := connectPolling(t, ts.URL, tt.auth)
			i := strings.Index(got, "44{")
			if i < 0 {
				t.Fatalf("no CONNECT_ERROR in %q", got)
			}
			var ce struct {
				Message string
				Data    struct{ Code, Reason string }
			}
			if err := json.NewDecoder(strings.NewReader(got[i+2:])).Decode(&ce); err != nil {
				t.Fatalf("%q: %v", got, err)
			}
			if ce.Message != "unauthorized" || ce.Data.Code != "unauthorized" || ce.Data.Reason != tt.reason {
				t.Errorf("got %+v, want unauthorized/unauthorized/%q", ce, tt.reason)
			}
		})
	}
	if v := testutil.ToFloat64(ts.Metrics.SocketsConnected); v != 0 {
		t.Errorf("sockets connected: got %v, want 0", v)
	}
	if got, want := testutil.ToFloat64(ts.Metrics.Handshakes.WithLabelValues(metrics.HandshakeUnauthorized)), float64(len(tests)); got != want {
		t.Errorf("unauthorized handshakes: got %v, want %v", got, want)
	}
}

func TestOriginAllowed(t *testing.T) {
	list := []string{"https://app.example", "http://localhost:5173"}
	tests := []struct {
		origin, host string
		origins      []string
		want         bool
	}{
		{"", "h", list, true},
		{"https://app.example", "h", list, true},
		{"https://APP.example/", "h", list, true},
		{"http://app.example", "h", list, false},
		{"https://app.example:8443", "h", list, false},
		{"http://localhost:5173", "h", list, true},
		{"http://localhost:5174", "h", list, false},
		{"https://evil.example", "h", list, false},
		{"null", "h", list, false},
		{"http://srv:3000", "srv:3000", nil, true}, // same host serves the page
		{"https://evil.example", "h", []string{"*"}, true},
	}
	for _, tt := range tests {
		if got := server.OriginAllowed(tt.origins, tt.origin, tt.host); got != tt.want {
			t.Errorf("OriginAllowed(%v, %q, %q) = %v, want %v", tt.origins, tt.origin, tt.host, got, tt.want)
		}
	}
}

func TestCORS(t *testing.T) {
	ts := newTestServer(t, server.Config{CORSOrigins: []string{"https://app.example"}})
	hs := "/socket.io/?EIO=4&transport=polling"

	resp, _ := do(t, "GET", ts.URL+hs, "", map[string]string{"Origin": "https://evil.example"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("evil polling handshake: got %d, want 403", resp.StatusCode)
	}
	resp, _ = do(t, "GET", ts.URL+"/socket.io/?EIO=4&transport=websocket", "", map[string]string{
		"Origin": "https://evil.example", "Connection": "Upgrade", "Upgrade": "websocket",
		"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
	})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("evil websocket upgrade: got %d, want 403", resp.StatusCode)
	}
	resp, _ = do(t, "GET", ts.URL+hs, "", map[string]string{"Origin": "https://app.example"})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("allowed: %d %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	resp, _ = do(t, "OPTIONS", ts.URL+hs, "", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// An established session's requests are checked too: a stolen sid
	// cannot be driven from a foreign page.
	sid := handshake(t, ts.URL, nil)
	resp, _ = do(t, "GET", ts.URL+hs+"&sid="+sid, "", map[string]string{"Origin": "https://evil.example"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("evil request on a session: got %d, want 403", resp.StatusCode)
	}
	if got := testutil.ToFloat64(ts.Metrics.Handshakes.WithLabelValues(metrics.HandshakeForbidden)); got != 2 {
		t.Errorf("forbidden_origin handshakes: got %v, want 2", got)
	}
}

// The REST API answers browsers under the same allow-list, but a request
// refused there is no Socket.IO handshake (it was counted as one), and a
// page on an allowed origin may read the rate limit's headers (a browser
// hid them: no Access-Control-Expose-Headers). A docs audit, 2026-12-07.
func TestRESTCORS(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	ts := newTestServerAPI(t, server.Config{CORSOrigins: []string{"https://app.example"}}, handlers.SessionConfig{NodeID: "n1"}, nil, api)
	evil := map[string]string{"Origin": "https://evil.example"}
	for _, m := range []string{"GET", "OPTIONS"} {
		if resp, _ := do(t, m, ts.URL+"/v1/me/privacy", "", evil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s from a refused origin: %d, want 403", m, resp.StatusCode)
		}
	}
	if got := testutil.ToFloat64(ts.Metrics.Handshakes.WithLabelValues(metrics.HandshakeForbidden)); got != 0 {
		t.Errorf("forbidden_origin handshakes after REST requests only: %v, want 0", got)
	}
	resp, _ := do(t, "GET", ts.URL+"/v1/me/privacy", "", map[string]string{"Origin": "https://app.example"})
	exposed := resp.Header.Get("Access-Control-Expose-Headers")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(exposed, "Retry-After") || !strings.Contains(exposed, "X-RateLimit-Remaining") {
		t.Errorf("allowed origin: %d, Access-Control-Expose-Headers %q; want Retry-After and the rate limit's exposed", resp.StatusCode, exposed)
	}
	// the Socket.IO path still counts its refusals
	if resp, _ := do(t, "GET", ts.URL+"/socket.io/?EIO=4&transport=polling", "", evil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("evil handshake: %d", resp.StatusCode)
	}
	if got := testutil.ToFloat64(ts.Metrics.Handshakes.WithLabelValues(metrics.HandshakeForbidden)); got != 1 {
		t.Errorf("forbidden_origin handshakes: %v, want 1", got)
	}
}

func TestHandshakeRateLimit(t *testing.T) {
	ts := newTestServer(t, server.Config{HandshakeLimit: 2, HandshakeWindow: time.Minute})
	sid := handshake(t, ts.URL, nil)
	handshake(t, ts.URL, nil)
	for _, transport := range []string{"polling", "websocket"} {
		resp, body := do(t, "GET", ts.URL+"/socket.io/?EIO=4&transport="+transport, "", map[string]string{
			"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
		})
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s over the limit: %d Retry-After=%q %q", transport, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	// requests of an existing session are not limited
	for range 5 {
		resp, body := do(t, "POST", ts.URL+"/socket.io/?EIO=4&transport=polling&sid="+sid, "3", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("session request limited: %d %q", resp.StatusCode, body)
		}
	}
	if got := testutil.ToFloat64(ts.Metrics.Handshakes.WithLabelValues(metrics.HandshakeRateLimited)); got != 2 {
		t.Errorf("rate_limited: got %v, want 2", got)
	}
}

func TestPollingBodyCap(t *testing.T) {
	ts := newTestServer(t, server.Config{MaxBuffer: 1024})
	sid := handshake(t, ts.URL, nil)
	u := ts.URL + "/socket.io/?EIO=4&transport=polling&sid=" + sid
	resp, _ := do(t, "POST", u, "4"+strings.Repeat("x", 2000), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("with Content-Length: got %d, want 413", resp.StatusCode)
	}
	sid = handshake(t, ts.URL, nil)
	u = ts.URL + "/socket.io/?EIO=4&transport=polling&sid=" + sid
	// chunked: no Content-Length
	req, _ := http.NewRequest("POST", u, io.MultiReader(strings.NewReader("4"), strings.NewReader(strings.Repeat("x", 2000))))
	req.ContentLength = -1
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: got %d, want 413", r.StatusCode)
	}
}

// A failing readiness check is logged once, not on every probe (a
// balancer probes each node every few seconds), and its recovery once.
func TestReadinessFailureLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	down := atomic.Bool{}
	down.Store(true)
	v, _ := auth.NewHS256([]byte(secret))
	m := metrics.New()
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))
	srv, err := server.New(server.Config{}, server.Deps{Log: log, Metrics: m, Verifier: v, Sockets: newSockets(m),
		Ready: []server.Check{{Name: "redis", Check: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for range 5 {
		if resp, _ := do(t, "GET", hs.URL+"/readyz", "", nil); resp.StatusCode != 503 {
			t.Fatalf("readyz: %d, want 503", resp.StatusCode)
		}
	}
	down.Store(false)
	for range 2 {
		if resp, _ := do(t, "GET", hs.URL+"/readyz", "", nil); resp.StatusCode != 200 {
			t.Fatalf("readyz: %d, want 200", resp.StatusCode)
		}
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "readiness check failed"); n != 1 {
		t.Errorf("%d lines of a failing check over 5 probes, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "readiness check recovered"); n != 1 || !strings.Contains(out, `"failed_checks":5`) {
		t.Errorf("recovery: want one line counting 5 failures:\n%s", out)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestHealthAndReadiness(t *testing.T) {
	failing := errors.New("dial tcp 10.1.2.3:6379: connection refused")
	ok := newTestServer(t, server.Config{}, server.Check{Name: "store", Check: func(context.Context) error { return nil }})
	bad := newTestServer(t, server.Config{}, server.Check{Name: "redis", Check: func(context.Context) error { return failing }})

	if resp, body := do(t, "GET", ok.URL+"/healthz", "", nil); resp.StatusCode != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("healthz: %d %q", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", ok.URL+"/readyz", "", nil); resp.StatusCode != 200 || !strings.Contains(body, `"store":"ok"`) {
		t.Errorf("readyz ok: %d %q", resp.StatusCode, body)
	}
	// the public probe names the failing check, never the error (an
	// internal address here)
	if resp, body := do(t, "GET", bad.URL+"/readyz", "", nil); resp.StatusCode != 503 || !strings.Contains(body, `"redis":"unavailable"`) || strings.Contains(body, "10.1.2.3") || strings.Contains(body, "refused") {
		t.Errorf("readyz failing: %d %q", resp.StatusCode, body)
	}
	resp, body := do(t, "GET", ok.URL+"/metrics", "", nil)
	for _, name := range []string{"presenced_sockets_connected", `presenced_handshakes_total{outcome="rate_limited"} 0`, "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, name) {
			t.Errorf("metrics lacks %s", name)
		}
	}
	if resp.StatusCode != 200 {
		t.Errorf("metrics: %d", resp.StatusCode)
	}
}

// serveLoopback runs srv.Serve on a loopback listener until cancel; done
// gets Serve's result.
func serveLoopback(tb testing.TB, srv *server.Server) (net.Listener, context.CancelFunc, chan error) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	return ln, cancel, done
}

func TestGracefulShutdown(t *testing.T) {
	v, _ := auth.NewHS256([]byte(secret))
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	sockets := newSockets(m)
	srv, err := server.New(server.Config{ShutdownTimeout: 5 * time.Second}, server.Deps{Log: log, Metrics: m, Verifier: v, Sockets: sockets})
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	base := "http://" + ln.Addr().String()
	for i := range 3 {
		if got := connectPolling(t, base, `{"token":"`+mint(t, "u"+string(rune('a'+i)))+`"}`); !strings.Contains(got, "session") {
			t.Fatalf("connect %d: %q", i, got)
		}
	}
	if got := sockets.Open(); got != 3 {
		t.Fatalf("open sockets: got %d, want 3", got)
	}
	cancel()
	chantest.NoError(t, done, 10*time.Second, "Serve's shutdown")
	if got := sockets.Open(); got != 0 {
		t.Errorf("open sockets after shutdown: got %d, want 0", got)
	}
	if got := testutil.ToFloat64(m.Disconnects.WithLabelValues("server shutting down")); got != 3 {
		t.Errorf("disconnect work ran %v times for 3 sockets", got)
	}
	if got := testutil.ToFloat64(m.SocketsConnected); got != 0 {
		t.Errorf("sockets gauge after shutdown: %v", got)
	}
}

// stallBody opens a connection to addr and sends a request whose body
// stops after 2 of its 1,000 bytes; the connection is returned open.
func stallBody(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nab"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	return c
}

// A request whose body stops arriving is cut after ReadBodyTimeout,
// whatever route it went to: it holds no connection beyond that.
func TestStalledBodyIsCut(t *testing.T) {
	ts := newTestServer(t, server.Config{ReadBodyTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(ts.URL, "http://")
	for _, path := range []string{"/socket.io/?EIO=4&transport=polling&sid=bogus", "/nowhere"} {
		c := stallBody(t, addr, path)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		start := time.Now()
		_, err := io.ReadAll(c) // an answer, if any, then the close
		if err != nil {
			t.Fatalf("%s: the connection of a stalled body was not closed: %v", path, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("%s: closed after %v", path, took)
		}
	}
}

// A shutdown ends within its timeout, and cleanly (Serve returns nil),
// while a client holds a request whose body never comes.
func TestShutdownWithStalledBody(t *testing.T) {
	v, _ := auth.NewHS256([]byte(secret))
	m := metrics.New()
	srv, err := server.New(server.Config{ShutdownTimeout: time.Second, ReadBodyTimeout: time.Minute},
		server.Deps{Log: slog.New(slog.DiscardHandler), Metrics: m, Verifier: v, Sockets: newSockets(m)})
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	stallBody(t, ln.Addr().String(), "/socket.io/?EIO=4&transport=polling&sid=bogus")
	time.Sleep(100 * time.Millisecond) // the request is in
	start := time.Now()
	cancel()
	chantest.NoError(t, done, 3*time.Second, "Serve's shutdown")
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("shutdown took %v, want half of its 1s timeout at most", took)
	}
}

// X-Forwarded-For counts for the per-IP handshake limit only from a
// trusted proxy: the test client (127.0.0.1) is one for the first server
// and not for the second.
func TestHandshakeLimitTrustsOnlyConfiguredProxies(t *testing.T) {
	xff := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	behind := newTestServer(t, server.Config{HandshakeLimit: 1, HandshakeWindow: time.Minute, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	handshake(t, behind.URL, xff("203.0.113.1"))
	handshake(t, behind.URL, xff("203.0.113.2"))              // another client behind the proxy
	handshake(t, behind.URL, xff("203.0.113.9, 203.0.113.3")) // the right-most untrusted one counts
	if resp, _ := do(t, "GET", behind.URL+"/socket.io/?EIO=4&transport=polling", "", xff("203.0.113.1")); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second handshake of 203.0.113.1: %d, want 429", resp.StatusCode)
	}

	direct := newTestServer(t, server.Config{HandshakeLimit: 1, HandshakeWindow: time.Minute})
	handshake(t, direct.URL, xff("203.0.113.1"))
	// a client that is not a trusted proxy cannot pick a fresh address
	if resp, _ := do(t, "GET", direct.URL+"/socket.io/?EIO=4&transport=polling", "", xff("203.0.113.2")); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("spoofed X-Forwarded-For from an untrusted peer: %d, want 429", resp.StatusCode)
	}
}

// A client that sends its headers too slowly, or keeps an idle keep-alive
// connection, is disconnected.
func TestHTTPTimeouts(t *testing.T) {
	v, _ := auth.NewHS256([]byte(secret))
	m := metrics.New()
	srv, err := server.New(server.Config{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond},
		server.Deps{Log: slog.New(slog.DiscardHandler), Metrics: m, Verifier: v, Sockets: newSockets(m)})
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	defer func() { cancel(); <-done }()

	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				var ne net.Error
				return !(errors.As(err, &ne) && ne.Timeout())
			}
		}
	}
	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = slow.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")) // never ends its headers
	if !closedWithin(slow, 3*time.Second) {
		t.Error("a client with unfinished headers was not disconnected")
	}

	// headers over MaxHeaderBytes: refused (431), kept nowhere
	big, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	_, _ = big.Write([]byte("GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", server.MaxHeaderBytes+8192) + "\r\n\r\n"))
	_ = big.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(big).ReadString('\n')
	if !strings.Contains(line, "431") {
		t.Errorf("headers over %d bytes: %q, want 431", server.MaxHeaderBytes, line)
	}

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = idle.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	if !closedWithin(idle, 3*time.Second) {
		t.Error("an idle keep-alive connection was not closed")
	}
}

// Every connect gives its gate slot back: accepted (once Connect ran),
// refused, or closed by its client before CONNECT was answered.
func TestConnectGateReleased(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	for i := range 3 {
		if got := connectPolling(t, ts.URL, `{"token":"`+mint(t, fmt.Sprintf("u%d", i))+`"}`); !strings.Contains(got, "session") {
			t.Fatalf("connect %d: %q", i, got)
		}
		if got := connectPolling(t, ts.URL, `{"token":"garbage"}`); !strings.Contains(got, "44{") {
			t.Fatalf("refusal %d: %q", i, got)
		}
	}
	// a client that sends CONNECT and closes at once
	sid := handshake(t, ts.URL, nil)
	u := ts.URL + "/socket.io/?EIO=4&transport=polling&sid=" + sid
	do(t, "POST", u, "40"+`{"token":"`+mint(t, "gone")+`"}`+"\x1e1", nil)
	deadline := time.Now().Add(3 * time.Second)
	for {
		slots, holders := ts.GateHeld()
		if slots == 0 && holders == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every connect ended: %d gate slots held by %d sockets", slots, holders)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// embeddedEmitter names the type of the emitter embedded in the struct p
// (a reflect.Value of a pointer to it) points to.
func embeddedEmitter(p reflect.Value) string {
	f := p.Elem().FieldByName("EventEmitter")
	if !f.IsValid() || f.IsNil() {
		return "none"
	}
	return f.Elem().Type().String()
}

// A long-polling POST that is no Engine.IO payload ends its session, as
// Engine.IO does: the library's polling transport dropped the decoder's
// error and kept the session open. A connected socket is disconnected with
// it. A good payload passes.
// pollingSocket opens a long-polling session of user on ts and connects
// its socket (the only one open on ts), and returns the session's URL.
func pollingSocket(t *testing.T, ts *testServer, user string) string {
	t.Helper()
	sid := handshake(t, ts.URL, nil)
	u := ts.URL + "/socket.io/?EIO=4&transport=polling&sid=" + sid
	if resp, body := do(t, "POST", u, "40"+`{"token":"`+mint(t, user)+`"}`, nil); resp.StatusCode != 200 {
		t.Fatalf("connect: %d %q", resp.StatusCode, body)
	}
	waitFor(t, func() bool { return ts.Sockets.Open() == 1 }, "the socket connected")
	return u
}

// Valid JSON with numbers beyond float64 over long-polling gets its
// handler's answer, as over websocket (TestWebsocketOutOfRangeNumbers) and
// in Node; the library's parser failed on it and ended the session.
func TestPollingOutOfRangeNumbers(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	u := pollingSocket(t, ts, "numbers")
	readSession(t, u)
	for i, tc := range []struct{ event, arg, want string }{
		{"conversation:join", `{"conversationId":1e999}`, `"code":"invalid_argument"`},
		{"conversation:join", `{"conversationId":` + strings.Repeat("9", 400) + `}`, `"code":"invalid_argument"`},
		{"heartbeat", `{"active":true,"x":-1e999}`, `"ok":true`},
		{"heartbeat", `{}`, `"ok":true`},
	} {
		id := strconv.Itoa(10 + i)
		if resp, body := do(t, "POST", u, "42"+id+`["`+tc.event+`",`+tc.arg+`]`, nil); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("POST %s %s: %d %q", tc.event, tc.arg, resp.StatusCode, body)
		}
		resp, body := do(t, "GET", u, "", nil)
		var ack string
		for _, p := range strings.Split(body, "\x1e") { // (the session event may come first)
			if strings.HasPrefix(p, "43"+id+"[") {
				ack = p
			}
		}
		if resp.StatusCode != 200 || !strings.Contains(ack, tc.want) {
			t.Errorf("%s %s: GET %d %q, want ack %s with %s", tc.event, tc.arg, resp.StatusCode, body, id, tc.want)
		}
	}
	if n := ts.Sockets.Open(); n != 1 {
		t.Fatalf("%d sockets open after them, want 1", n)
	}
}

func TestPollingBadPayloadEndsSession(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	for _, bad := range []string{"zzz", "9", "", "b!!!notbase64", "4hi\x1e9", "\x1e\x1e", `42["a"]` + "\x1e\x1e" + `42["b"]`, "\x1e" + `42["a"]`} {
		u := pollingSocket(t, ts, "garbler")
		do(t, "POST", u, bad, nil)
		if resp, body := do(t, "GET", u, "", nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Session ID unknown") {
			t.Errorf("GET after POST %q: %d %q, want the session gone", bad, resp.StatusCode, body)
		}
		waitFor(t, func() bool { return ts.Sockets.Open() == 0 }, "the socket disconnected")
	}
	// a Socket.IO packet the library cannot decode: the session closes
	// while the POST is read, which is answered 200 "ok" as in Node (the
	// library's 429 read as a rate limit)
	for _, bad := range []string{`421[heartbeat`, `421[]`} {
		u := pollingSocket(t, ts, "garbler")
		poll := waitingGet(t, u) // a client always has a GET waiting
		if resp, body := do(t, "POST", u, bad, nil); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("POST %q: %d %q, want 200 ok", bad, resp.StatusCode, body)
		}
		if body := <-poll; !strings.HasSuffix(body, "1") {
			t.Errorf("the waiting GET got %q, want the session's CLOSE", body)
		}
		waitFor(t, func() bool { return ts.Sockets.Open() == 0 }, "the socket disconnected")
	}
	sid := handshake(t, ts.URL, nil)
	u := ts.URL + "/socket.io/?EIO=4&transport=polling&sid=" + sid
	if resp, body := do(t, "POST", u, "6\x1e6", nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("POST of two NOOPs: %d %q", resp.StatusCode, body)
	}
}

// waitFor waits up to 3 s for cond.
func waitFor(tb testing.TB, cond func() bool, what string) {
	tb.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within 3 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With AllowEIO3 a client of Engine.IO v3 (socket.io-client 2.x), which
// has no auth payload, gives its token as a query parameter: of the
// handshake request (the main namespace, which such a client joins without
// a CONNECT), or of a CONNECT's namespace; the socket keeps it nowhere.
// Before, every v3 client was refused "missing token".
func TestEIO3Token(t *testing.T) {
	ts := newTestServer(t, server.Config{AllowEIO3: true})
	poll := func(u string) string {
		var got string
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(got, "session") && !strings.Contains(got, "unauthorized") {
			_, body := do(t, "GET", u, "", nil)
			got += body
		}
		return got
	}
	sid3 := func(query string) string {
		resp, body := do(t, "GET", ts.URL+"/socket.io/?EIO=3&transport=polling"+query, "", nil)
		i := strings.Index(body, "{")
		var open struct{ Sid string }
		if resp.StatusCode != 200 || i < 0 || json.Unmarshal([]byte(body[i:strings.LastIndex(body, "}")+1]), &open) != nil || open.Sid == "" {
			t.Fatalf("v3 handshake: %d %q", resp.StatusCode, body)
		}
		return open.Sid
	}
	// the handshake's query
	sid := sid3("&token=" + mint(t, "vthree"))
	if got := poll(ts.URL + "/socket.io/?EIO=3&transport=polling&sid=" + sid); !strings.Contains(got, `"session",{"userId":"vthree"`) {
		t.Fatalf("v3 client with a token in the handshake's query: %q", got)
	}
	// a CONNECT's namespace query, after the main namespace refused the
	// handshake without one
	sid = sid3("")
	u := ts.URL + "/socket.io/?EIO=3&transport=polling&sid=" + sid
	if got := poll(u); !strings.Contains(got, "missing token") {
		t.Fatalf("v3 client without a token: %q", got)
	}
	pkt := "40/?token=" + mint(t, "vconnect") + ","
	if resp, body := do(t, "POST", u, strconv.Itoa(len(pkt))+":"+pkt, nil); resp.StatusCode != 200 {
		t.Fatalf("v3 CONNECT: %d %q", resp.StatusCode, body)
	}
	if got := poll(u); !strings.Contains(got, `"session",{"userId":"vconnect"`) {
		t.Fatalf("v3 client with a token in its CONNECT: %q", got)
	}
	ts.Server.IO().Sockets().Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
		h := s.Handshake()
		if _, ok := h.Query["token"]; ok || strings.Contains(h.Url, "token") || h.Auth["token"] != nil {
			t.Errorf("socket %s keeps its token: query %v, url %q, auth %v", s.Id(), h.Query, h.Url, h.Auth)
		}
		return true
	})
}

// A long-polling POST refused before the engine reads it ends its session
// too, as Engine.IO ends it: a body over MaxBuffer (413, with a length or
// chunked) and a body cut short (400); and so does a v3 POST that is no
// v3 payload. Before, the session stayed, and its user online until the
// ping timeout.
func TestPollingRefusedPostEndsSession(t *testing.T) {
	ts := newTestServer(t, server.Config{MaxBuffer: 1024, AllowEIO3: true})
	open := func(eio string) string {
		if eio == "4" {
			return pollingSocket(t, ts, "refused")
		}
		resp, body := do(t, "GET", ts.URL+"/socket.io/?EIO=3&transport=polling&token="+mint(t, "refused3"), "", nil)
		i := strings.Index(body, `"sid":"`)
		if resp.StatusCode != 200 || i < 0 {
			t.Fatalf("v3 handshake: %d %q", resp.StatusCode, body)
		}
		sid := body[i+7 : i+7+strings.Index(body[i+7:], `"`)]
		waitFor(t, func() bool { return ts.Sockets.Open() == 1 }, "the v3 socket connected")
		return ts.URL + "/socket.io/?EIO=3&transport=polling&sid=" + sid
	}
	gone := func(what, u string) {
		t.Helper()
		if resp, body := do(t, "GET", u, "", nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Session ID unknown") {
			t.Errorf("GET after %s: %d %q, want the session gone", what, resp.StatusCode, body)
		}
		waitFor(t, func() bool { return ts.Sockets.Open() == 0 }, "the socket disconnected after "+what)
	}
	big := `42["x","` + strings.Repeat("a", 2000) + `"]`

	u := open("4")
	if resp, _ := do(t, "POST", u, big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize POST: %d", resp.StatusCode)
	}
	gone("an oversize POST", u)

	u = open("4")
	req, _ := http.NewRequest("POST", u, io.MultiReader(strings.NewReader(big))) // no length: chunked
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize chunked POST: %d", resp.StatusCode)
	}
	gone("an oversize chunked POST", u)

	u = open("4")
	addr := strings.TrimPrefix(ts.URL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(u, ts.URL)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\nContent-Type: text/plain;charset=UTF-8\r\n\r\n42[\"cut\"", path, addr)
	_ = c.(*net.TCPConn).CloseWrite()
	_, _ = io.ReadAll(c)
	c.Close()
	gone("a POST cut short", u)

	// a second POST while the first is under way (its body still coming)
	u = open("4")
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 9\r\nContent-Type: text/plain;charset=UTF-8\r\n\r\n42[\"x", strings.TrimPrefix(u, ts.URL), addr)
	time.Sleep(200 * time.Millisecond) // the first POST reads its body
	if resp, body := do(t, "POST", u, `42["y"]`, nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("overlapping POST: %d %q, want 400", resp.StatusCode, body)
	}
	gone("an overlapping POST", u)
	fmt.Fprint(c, `"]`)
	c.Close()

	for _, bad := range []string{`42["x"]`, `99:42["x"]`, "ab:42", "1:9"} {
		u = open("3")
		do(t, "POST", u, bad, nil)
		gone(fmt.Sprintf("the v3 POST %q", bad), u)
	}
	u = open("3")
	if resp, body := do(t, "POST", u, "1:6", nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("v3 NOOP: %d %q", resp.StatusCode, body)
	}
}

// The server's own routes answer a wrong method as /v1 does: 405 with
// Allow and the methods named (they gave a bare "method not allowed"
// without Allow: a docs audit, 2026-12-07).
func TestRootMethodNotAllowed(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, body := do(t, "POST", ts.URL+path, "", nil)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" || !strings.Contains(body, "method POST is not allowed here; allowed: GET") {
			t.Errorf("POST %s: %d, Allow %q, %q", path, resp.StatusCode, resp.Header.Get("Allow"), body)
		}
	}
}

// A long-polling POST that ends its session at the Engine.IO level (no
// Engine.IO payload, or over MaxBuffer) while a GET of the session waits
// gives that GET the session's CLOSE, as Node's engine does: the client
// reports "transport close". The GET got a NOOP, and the client reported
// the POST's failure instead, "transport error" (a black-box audit against
// Node, 2026-12-07).
func TestPollingEndedWithAGetWaiting(t *testing.T) {
	ts := newTestServer(t, server.Config{MaxBuffer: 1024})
	for _, bad := range []string{"9", "6\x1e", "\x1e", "zzz", `42["x","` + strings.Repeat("a", 2000) + `"]`} {
		u := pollingSocket(t, ts, "waiter")
		poll := waitingGet(t, u)
		resp, body := do(t, "POST", u, bad, nil)
		want := http.StatusOK
		if len(bad) > 1024 {
			want = http.StatusRequestEntityTooLarge
		}
		if resp.StatusCode != want {
			t.Errorf("POST %.20q: %d %q, want %d", bad, resp.StatusCode, body, want)
		}
		if got := <-poll; got != "1" {
			t.Errorf("after POST %.20q the waiting GET got %q, want the session's CLOSE \"1\"", bad, got)
		}
		waitFor(t, func() bool { return ts.Sockets.Open() == 0 }, "the socket disconnected")
		if resp, body := do(t, "GET", u, "", nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Session ID unknown") {
			t.Errorf("GET after POST %.20q: %d %q, want the session gone", bad, resp.StatusCode, body)
		}
	}
}

// A handshake of an Engine.IO version not served is answered with
// Engine.IO's code for it, 5, as Node answers (the library said 4,
// Forbidden's code: a black-box audit against Node, 2026-12-07).
func TestUnsupportedProtocolVersionCode(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	for _, q := range []string{"EIO=3&", "", "EIO=abc&"} {
		resp, body := do(t, "GET", ts.URL+"/socket.io/?"+q+"transport=polling", "", nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":5`) || !strings.Contains(body, "Unsupported protocol version") {
			t.Errorf("handshake with %q: %d %q, want 400 with code 5", q, resp.StatusCode, body)
		}
	}
}

// A polling answer over the compression threshold is never "deflate": the
// library's is raw DEFLATE where HTTP's deflate is zlib's format, and
// strict decoders failed on it (a black-box audit against Node,
// 2026-12-07). A client that offers gzip too gets gzip, as before.
func TestPollingNoRawDeflate(t *testing.T) {
	ts := newTestServer(t, server.Config{})
	u := pollingSocket(t, ts, "deflater")
	readSession(t, u)
	for _, tc := range []struct{ accept, want string }{{"deflate", ""}, {"gzip, deflate", "gzip"}, {"deflate;q=1.0, identity", ""}} {
		acks := make([]string, 60) // their answers: over the 1 KB threshold
		for i := range acks {
			acks[i] = "42" + strconv.Itoa(100+i) + `["heartbeat",{}]`
		}
		if resp, body := do(t, "POST", u, strings.Join(acks, "\x1e"), nil); resp.StatusCode != 200 {
			t.Fatalf("heartbeats: %d %q", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
		resp, body := do(t, "GET", u, "", map[string]string{"Accept-Encoding": tc.accept})
		if got := resp.Header.Get("Content-Encoding"); got != tc.want || got == "" && len(body) < 1024 {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q (%d bytes: %.60q), want %q over 1 KB", tc.accept, got, len(body), body, tc.want)
		}
	}
}

// readSession reads the session's first packets at u, up to its session
// event (which may come in a GET of its own, after the CONNECT's answer).
func readSession(t *testing.T, u string) {
	t.Helper()
	var first string
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(first, `"session"`) && time.Now().Before(deadline) {
		_, body := do(t, "GET", u, "", nil)
		first += body
	}
}

// waitingGet reads the session's first packets at u (up to its session
// event), then starts a GET that waits for the next ones, as a client
// always has one: its body (or error) comes on the channel.
func waitingGet(t *testing.T, u string) chan string {
	t.Helper()
	readSession(t, u)
	poll := make(chan string, 1)
	go func() {
		resp, err := http.Get(u)
		if err != nil {
			poll <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		poll <- string(b)
	}()
	time.Sleep(100 * time.Millisecond)
	return poll
}
