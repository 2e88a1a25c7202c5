package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/httprate"
	eioparser "github.com/zishang520/socket.io/parsers/engine/v3/parser"
	"github.com/zishang520/socket.io/servers/engine/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/stack"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/transport"
)

// isHandshake reports whether r opens a new Engine.IO session: the first
// request of either transport carries no sid.
func isHandshake(r *http.Request) bool {
	return r.URL.Query().Get("sid") == ""
}

// OriginAllowed reports whether a browser origin may use the server. An
// origin matches an entry of the allow-list exactly (scheme, host, port),
// "*" allows any, and a page served by this very host is always allowed.
func OriginAllowed(origins []string, origin, host string) bool {
	if origin == "" {
		return true // not a browser cross-origin request
	}
	if slices.Contains(origins, "*") {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	norm := strings.ToLower(strings.TrimRight(origin, "/"))
	for _, o := range origins {
		if strings.ToLower(strings.TrimRight(o, "/")) == norm {
			return true
		}
	}
	return false
}

// cors enforces the origin allow-list on every /socket.io/ request, for
// both transports: a websocket upgrade or a polling request from a
// disallowed origin is refused with 403 before it reaches the engine (CORS
// headers alone would not stop a websocket), and a refused handshake is
// counted. Allowed origins get the CORS headers and preflights are
// answered here.
func (s *Server) cors(next http.Handler) http.Handler { return s.corsFor(next, true, "") }

// restExposed are the response headers of /v1 that a page on an allowed
// origin may read: without Access-Control-Expose-Headers a browser hides
// all but the safelisted ones, and a page read the 429's Retry-After and
// the rate limit's headers as null (a docs audit, 2026-12-07).
const restExposed = "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, WWW-Authenticate"

// restCORS is cors for the REST API (/v1): the same allow-list, its
// headers exposed, and nothing counted as a handshake (a refused REST
// request counted as a refused Socket.IO handshake).
func (s *Server) restCORS(next http.Handler) http.Handler {
	return s.corsFor(next, false, restExposed)
}

func (s *Server) corsFor(next http.Handler, engine bool, expose string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !OriginAllowed(s.cfg.CORSOrigins, origin, r.Host) {
			if engine && isHandshake(r) {
				s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeForbidden).Inc()
			}
			handlers.WriteError(w, http.StatusForbidden, "forbidden", "origin not allowed")
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Add("Vary", "Origin")
		if expose != "" {
			h.Set("Access-Control-Expose-Headers", expose)
		}
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, OPTIONS")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuseWebsocketReupgrade refuses a websocket upgrade of a session that is
// on a websocket already (400, Engine.IO's "Bad request"): Engine.IO
// upgrades only from polling, and a second websocket that took a session
// over left it without its heartbeat (the first transport's), so that a
// client that then froze stayed connected for good.
func (s *Server) refuseWebsocketReupgrade(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if sid := q.Get("sid"); sid != "" && q.Get("transport") == "websocket" {
			if c, ok := s.io.Engine().Clients().Load(sid); ok {
				if t := c.Transport(); t != nil && t.Name() == "websocket" {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"code":3,"message":"Bad request"}`))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// rejectWhileDraining refuses new Engine.IO sessions once shutdown began.
func (s *Server) rejectWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() && isHandshake(r) {
			s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeDraining).Inc()
			w.Header().Set("Retry-After", "1")
			handlers.WriteError(w, http.StatusServiceUnavailable, handlers.CodeUnavailable, "server is shutting down")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitHandshakes rate-limits new Engine.IO sessions per client IP, whatever
// the transport; requests of an established session pass freely.
func (s *Server) limitHandshakes(next http.Handler) http.Handler {
	if s.handshakes == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHandshake(r) && s.handshakes.RespondOnLimit(w, r, handlers.ClientIP(r)) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// newHandshakeLimiter is the per-IP handshake limit (nil when off).
func (s *Server) newHandshakeLimiter() *httprate.RateLimiter {
	if s.cfg.HandshakeLimit <= 0 {
		return nil
	}
	// keyed by handlers.ClientIP, by its callers (limitHandshakes, and
	// reconnectLimited with the address kept from the first CONNECT)
	return httprate.NewRateLimiter(s.cfg.HandshakeLimit, s.cfg.HandshakeWindow,
		httprate.WithLimitHandler(func(w http.ResponseWriter, _ *http.Request) {
			s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeRateLimited).Inc()
			if w.Header().Get("Retry-After") == "" {
				w.Header().Set("Retry-After", strconv.Itoa(int((s.cfg.HandshakeWindow+time.Second-1)/time.Second)))
			}
			handlers.WriteError(w, http.StatusTooManyRequests, "rate_limited", "too many handshakes from this address")
		}),
	)
}

// refuseOverlappingPosts ends a long-polling session that is sent a POST
// while another of its POSTs is under way, and answers the second 400, as
// Engine.IO does ("data request overlap from client"): a client sends its
// packets one POST at a time, so a second one at once is no client of
// the protocol, and the two bodies' packets would have no order. The
// library's transport took both.
func (s *Server) refuseOverlappingPosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pollingClose(r) == "" {
			next.ServeHTTP(w, r)
			return
		}
		sid := r.URL.Query().Get("sid")
		if _, busy := s.posting.LoadOrStore(sid, struct{}{}); busy {
			// (as the client's close: a close from the server's side
			// would abort the POST under way)
			injectPollingClose(next, r)
			handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "a POST of this session is under way")
			return
		}
		defer s.posting.Delete(sid)
		next.ServeHTTP(w, r)
	})
}

// capPollingBody refuses long-polling POST bodies over MaxBuffer with 413.
// The engine checks Content-Length but silently truncates a body sent
// without one (chunked), so such a body is read here, bounded, first.
//
// A long-polling GET gets a write deadline: the poll may wait up to the
// ping interval for data, and its client then has MaxUnreadAge to take
// it. A client that never reads its response no longer holds the
// handler (and the data it was given) forever.
func (s *Server) capPollingBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Get("transport") == "polling" {
			if s.cfg.MaxUnreadAge > 0 {
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.PingInterval + s.cfg.MaxUnreadAge))
			}
			if ae := r.Header.Get("Accept-Encoding"); ae != "" {
				r.Header.Set("Accept-Encoding", withoutDeflate(ae))
			}
		}
		if r.Method == http.MethodPost {
			if r.ContentLength > s.cfg.MaxBuffer {
				s.endPollingSession(next, r)
				handlers.WriteError(w, http.StatusRequestEntityTooLarge, "limit_exceeded", "payload too large")
				return
			}
			if r.ContentLength < 0 {
				body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBuffer+1))
				if err != nil {
					s.endPollingSession(next, r)
					handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "unreadable body")
					return
				}
				if int64(len(body)) > s.cfg.MaxBuffer {
					s.endPollingSession(next, r)
					handlers.WriteError(w, http.StatusRequestEntityTooLarge, "limit_exceeded", "payload too large")
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				r.ContentLength = int64(len(body))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// closeOnBadPollingPayload ends a session whose long-polling POST is no
// Engine.IO payload (an unknown packet type, bad base64, an empty body or
// an empty packet in it, a v3 length that is no number or runs past the
// body), or whose body could not be read whole, as Engine.IO does (a
// "parse error", a request "closed prematurely"). The library's polling
// transport drops the decoder's error and keeps the session open: a client
// could go on posting garbage for as long as it answered pings, and a user
// whose POST connection broke stayed online until the ping timeout. (Our
// websocket transport closes at once.) The body is handed on as a CLOSE
// packet, so that the transport closes the way it does for a client's
// close (200 "ok", as Node answers such a POST; the session is gone for
// the next request). Closing the engine socket from here instead left the
// transport's close timer running for 30 s. capPollingBody ends the
// session of a body over MaxBuffer the same way (endPollingSession).
func (s *Server) closeOnBadPollingPayload(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close := pollingClose(r)
		if close == "" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body) // bounded by capPollingBody
		if err != nil {
			s.endPollingSession(next, r)
			handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "unreadable body")
			return
		}
		if !validPayload(r.URL.Query().Get("EIO"), body, r.Header.Get("Content-Type")) {
			if s.closeWithPendingGet(r) {
				writeOK(w)
				return
			}
			body = []byte(close)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		s.handPost(next, &closedPostWriter{ResponseWriter: w}, r, body)
	})
}

// handPost hands a long-polling POST's packets (body, as r carries it)
// to the library MaxQueued at a time, each group once the socket's queue
// is below the bound, as the websocket transport hands its messages
// (transport.Backlogger); a group's packets count until the library has
// taken them off the queue. A client sends its next POST once this one is
// answered. A POST may carry MaxBuffer of packets (12,500 tiny events in
// 100 KiB): until 2026-12-07 the bound counted a POST as one message, all
// its packets were decoded and queued at once, and one user's 20 polling
// sockets took a node from 70 MB to 690 MB, both cores busy (a black-box
// audit; over websocket the same events cost 40 MB). The client gets the
// last group's answer, or the first that is not 200 (the rest is dropped):
// 200 "ok" if that is the 400 of a session an earlier group closed. A v3
// payload goes whole.
func (s *Server) handPost(next http.Handler, w http.ResponseWriter, r *http.Request, body []byte) {
	sid := r.URL.Query().Get("sid")
	var slot any
	id := func() string { return sid }
	groups, sizes := [][]byte{body}, []int{1}
	if r.URL.Query().Get("EIO") == "4" {
		groups, sizes = splitPayload(body, transport.MaxQueued)
	}
	if len(groups) == 1 {
		transport.AwaitBacklog(s.deps.Sockets, &slot, id)
		next.ServeHTTP(w, r)
		s.deps.Sockets.Mark(&slot, id, sizes[0])
		return
	}
	var rec *postRecorder
	for i, g := range groups {
		transport.AwaitBacklog(s.deps.Sockets, &slot, id)
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(g))
		req.ContentLength = int64(len(g))
		req.Header.Set("Content-Length", strconv.Itoa(len(g)))
		rec = &postRecorder{header: http.Header{}}
		next.ServeHTTP(rec, req)
		if rec.code != http.StatusOK {
			if i > 0 && rec.code == http.StatusBadRequest {
				// the session ended with an earlier group (its CLOSE):
				// the POST was read, as Engine.IO answers it
				writeOK(w)
				return
			}
			break
		}
		s.deps.Sockets.Mark(&slot, id, sizes[i])
	}
	maps.Copy(w.Header(), rec.header)
	w.WriteHeader(rec.code)
	_, _ = w.Write(rec.body.Bytes())
}

// awaitPost waits until no long-polling POST of session sid is under
// way (refuseOverlappingPosts), for at most MaxUnreadAge (30 s when that
// is off): an upgrade to websocket waits for it (BeforeUpgrade), so that
// the groups of a POST handPost is still handing reach the polling
// transport before the engine closes it. The client's packets sent on the
// websocket after the upgrade come after the POST's, in order.
func (s *Server) awaitPost(sid string) {
	limit := s.cfg.MaxUnreadAge
	if limit <= 0 {
		limit = 30 * time.Second
	}
	deadline := time.Now().Add(limit)
	for wait := 100 * time.Microsecond; time.Now().Before(deadline); wait = min(2*wait, 10*time.Millisecond) {
		if _, busy := s.posting.Load(sid); !busy {
			return
		}
		time.Sleep(wait)
	}
}

// splitPayload splits an Engine.IO v4 polling payload (packets separated
// by 0x1e) into payloads of n packets at most, and tells each one's count.
func splitPayload(body []byte, n int) (groups [][]byte, sizes []int) {
	start, count := 0, 0
	for i, b := range body {
		if b != 0x1e {
			continue
		}
		if count++; count == n {
			groups, sizes = append(groups, body[start:i]), append(sizes, count)
			start, count = i+1, 0
		}
	}
	return append(groups, body[start:]), append(sizes, count+1)
}

// postRecorder keeps the library's answer to a part of a long-polling
// POST (handPost).
type postRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (p *postRecorder) Header() http.Header { return p.header }

func (p *postRecorder) WriteHeader(code int) {
	if p.code == 0 {
		p.code = code
	}
}

func (p *postRecorder) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.body.Write(b)
}

// closedPostWriter answers 200 "ok" for a long-polling POST during which
// the session closed (a packet the library could not decode, say), as
// Node does: the library's transport, closing, answers the POST it is
// reading 429 Too Many Requests with an empty body, which clients and
// monitoring read as a rate limit.
type closedPostWriter struct {
	http.ResponseWriter
	closed bool
}

func (c *closedPostWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		c.closed = true
		writeOK(c.ResponseWriter)
		return
	}
	c.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the writer beneath.
func (c *closedPostWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *closedPostWriter) Write(b []byte) (int, error) {
	if c.closed {
		return len(b), nil // (the 429's body: none)
	}
	return c.ResponseWriter.Write(b)
}

// pollingClose is, for r a long-polling POST of a session, a payload of
// one CLOSE packet in the framing of its Engine.IO version; "" for another
// request or version.
func pollingClose(r *http.Request) string {
	q := r.URL.Query()
	if r.Method != http.MethodPost || q.Get("sid") == "" || q.Get("transport") != "polling" {
		return ""
	}
	switch q.Get("EIO") {
	case "4":
		return "1"
	case "3":
		return "1:1"
	}
	return ""
}

// validPayload reports whether body is a polling payload of Engine.IO
// version eio (see pollingClose) that Engine.IO accepts: every packet
// decodes, and none is empty. A v3 binary payload (octet-stream) is left
// to the transport.
func validPayload(eio string, body []byte, contentType string) bool {
	if len(body) == 0 {
		return false
	}
	if eio == "3" {
		if strings.HasPrefix(contentType, "application/octet-stream") {
			return true
		}
		_, err := eioparser.Parserv3().DecodePayload(types.NewStringBuffer(body))
		return err == nil
	}
	if body[0] == 0x1e || body[len(body)-1] == 0x1e || bytes.Contains(body, []byte{0x1e, 0x1e}) {
		return false // an empty packet
	}
	if bytes.Count(body, []byte("\x1e40/"))+boolInt(bytes.HasPrefix(body, []byte("40/"))) > transport.MaxOtherNspConnects {
		return false // CONNECTs to namespaces not served, as on the websocket
	}
	return validV4Packets(body)
}

// validV4Packets reports whether every packet of a v4 payload (without
// empty packets) is one the library's decoder takes (its DecodePayload):
// a known type ('0'-'6'), or 'b' and base64. It checks in place (one
// scratch buffer for the base64 packets' bytes): decoding
// a 100 KiB payload of tiny events into the library's packets just to see
// that it could made as many objects as it held packets, once more for
// each POST, and a node under a stream of such POSTs held hundreds of MB
// of that garbage at its peaks (a black-box re-audit, 2026-12-07).
func validV4Packets(body []byte) bool {
	var scratch []byte // the base64 packets' bytes, one buffer for all
	for rest := body; len(rest) > 0; {
		pk := rest
		if i := bytes.IndexByte(rest, 0x1e); i >= 0 {
			pk, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(pk) == 0 {
			return false // (validPayload refuses those first)
		}
		switch c := pk[0]; {
		case c == 'b':
			// (StdEncoding.Decode skips \r and \n, as the library's
			// streaming decoder does)
			if n := base64.StdEncoding.DecodedLen(len(pk) - 1); cap(scratch) < n {
				scratch = make([]byte, n)
			}
			if _, err := base64.StdEncoding.Decode(scratch[:cap(scratch)], pk[1:]); err != nil {
				return false
			}
		case c < '0' || c > '6':
			return false
		}
	}
	return true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endPollingSession ends the session of r, a long-polling POST refused
// before the engine saw it (its body over MaxBuffer, or unreadable), and
// the caller answers r: from the server's side if a GET of it waits
// (closeWithPendingGet), else by handing the engine a CLOSE for the
// session, its answer discarded. Engine.IO ends a session on such a POST;
// the library's transport kept it. Other requests are left alone.
func (s *Server) endPollingSession(next http.Handler, r *http.Request) {
	if pollingClose(r) == "" || s.closeWithPendingGet(r) {
		return
	}
	injectPollingClose(next, r)
}

// injectPollingClose ends r's long-polling session as the client's CLOSE
// would (see endPollingSession).
func injectPollingClose(next http.Handler, r *http.Request) {
	close := pollingClose(r)
	if close == "" {
		return
	}
	cr := r.Clone(context.WithoutCancel(r.Context())) // r's ends with its connection, which may be gone
	cr.Body = io.NopCloser(strings.NewReader(close))
	cr.ContentLength = int64(len(close))
	cr.Header.Del("Content-Type")
	next.ServeHTTP(discardResponse{header: http.Header{}}, cr)
}

// withoutDeflate is an Accept-Encoding without its "deflate": the
// library's "deflate" is raw DEFLATE, where HTTP's is zlib's format (RFC
// 9110 §8.4.1.2; Node's engine sends that), so that strict decoders of a
// client that offered deflate and not gzip failed (a black-box audit
// against Node, 2026-12-07). Such a client gets the answer uncompressed,
// or in another coding it offered.
func withoutDeflate(ae string) string {
	if !strings.Contains(strings.ToLower(ae), "deflate") {
		return ae
	}
	var kept []string
	for _, part := range strings.Split(ae, ",") {
		coding, _, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "deflate") {
			kept = append(kept, strings.TrimSpace(part))
		}
	}
	return strings.Join(kept, ", ")
}

// closeWithPendingGet closes the long-polling session of r (a POST that
// ends it, refused or undecodable) from the server's side when a GET of it
// is waiting: the GET gets CLOSE ("1"), as Node's engine answers it after
// a parse error or an oversized body, and the client reports "transport
// close". A CLOSE handed in as the client's (endPollingSession) got it a
// NOOP, and the client reported the POST's failure instead, "transport
// error" (a black-box audit against Node, 2026-12-07). false: no GET is
// waiting (the caller ends the session as the client's close, which does
// not keep it for 30 s for the next GET), or there is no such session.
func (s *Server) closeWithPendingGet(r *http.Request) bool {
	c, ok := s.io.Engine().Clients().Load(r.URL.Query().Get("sid"))
	if !ok {
		return false
	}
	t := c.Transport()
	if t == nil || t.Name() != "polling" || !t.Writable() {
		return false
	}
	c.Close(false)
	return true
}

// writeOK answers a long-polling POST 200 "ok", as Engine.IO does.
func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.Header().Set("Content-Length", "2")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("ok"))
}

// discardResponse is a ResponseWriter that keeps nothing.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header         { return d.header }
func (d discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (d discardResponse) WriteHeader(int)             {}

// releaseOnHijack hands the engine a websocket upgrade's ResponseWriter
// that lets go of net/http's once the connection is hijacked. The engine
// keeps each connection's request context, and with it the ResponseWriter,
// for the connection's life; net/http's holds its connection state, whose
// 4 KiB read and 4 KiB write buffers are never used again after the
// upgrade (our transport reads and writes the hijacked connection itself).
// Measured: 8.4 KB of heap per websocket, of about 40. The request it hands
// on is a lean copy (upgradeRequest).
func releaseOnHijack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			next.ServeHTTP(w, r)
			return
		}
		stack.Grow() // the engine's upgrade and handshake are deep
		next.ServeHTTP(&hijackWriter{ResponseWriter: w}, upgradeRequest(r))
	})
}

// upgradeHeaders are the request headers a websocket upgrade hands the
// engine: those the upgrade and the engine read. The engine keeps each
// connection's request until the namespace accepts it
// (transport.ReleaseRequest), and the Socket.IO handshake copies its
// headers and query into maps of its own for the socket's life; nothing
// here reads the rest. A browser's other headers (cookies, user agent,
// languages, cache directives) would be kept per socket.
var upgradeHeaders = [...]string{"Connection", "Upgrade", "Sec-Websocket-Key", "Sec-Websocket-Version",
	"Sec-Websocket-Extensions", "Sec-Websocket-Protocol", "Origin", "X-Forwarded-Proto"}

// upgradeQuery are the query parameters it hands on: Engine.IO's.
var upgradeQuery = [...]string{"EIO", "transport", "sid", "b64"}

// upgradeRequest is the request a websocket upgrade hands the engine: r's
// method, path, host, remote address and TLS state, with only
// upgradeHeaders and upgradeQuery, and a context of its own (no values of
// the router's or of net/http's) that ends when r's does.
func upgradeRequest(r *http.Request) *http.Request {
	q := r.URL.Query()
	keep := make(url.Values, len(upgradeQuery))
	for _, k := range upgradeQuery {
		if v, ok := q[k]; ok {
			keep[k] = v
		}
	}
	u := &url.URL{Path: r.URL.Path, RawQuery: keep.Encode()}
	ctx, cancel := context.WithCancel(context.Background())
	context.AfterFunc(r.Context(), cancel)
	lean, err := http.NewRequestWithContext(ctx, r.Method, u.String(), http.NoBody)
	if err != nil {
		cancel()
		return r // not expected: u came from a parsed URL
	}
	lean.URL = u
	lean.Header = make(http.Header, len(upgradeHeaders))
	for _, k := range upgradeHeaders {
		if v, ok := r.Header[k]; ok {
			// a copy: net/http gives all of a request's header values
			// one backing array, which would keep every value alive
			lean.Header[k] = slices.Clone(v)
		}
	}
	lean.Proto, lean.ProtoMajor, lean.ProtoMinor = r.Proto, r.ProtoMajor, r.ProtoMinor
	lean.Host, lean.RemoteAddr, lean.TLS = r.Host, r.RemoteAddr, r.TLS
	lean.RequestURI = u.RequestURI()
	return lean
}

// hijackWriter is a ResponseWriter that forgets the one it wraps once its
// connection is hijacked; after that, what is written is refused as
// net/http refuses it.
type hijackWriter struct {
	http.ResponseWriter
}

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if _, done := h.ResponseWriter.(hijackedWriter); done {
		return nil, nil, http.ErrHijacked
	}
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err == nil {
		h.ResponseWriter = hijackedWriter{header: http.Header{}}
	}
	return conn, brw, err
}

// Unwrap is for http.ResponseController.
func (h *hijackWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

type hijackedWriter struct{ header http.Header }

func (w hijackedWriter) Header() http.Header     { return w.header }
func (hijackedWriter) Write([]byte) (int, error) { return 0, http.ErrHijacked }
func (hijackedWriter) WriteHeader(int)           {}

// boundBody gives a request with a body ReadBodyTimeout for it to arrive
// (the connection's read deadline, lifted once the body has been read to
// its end, so that nothing after it is cut). net/http has no such bound
// once the headers are in: a client could send a part of a body and then
// nothing, and hold the connection, a goroutine and a shutdown forever,
// without a handshake or a token. A body read past the deadline fails,
// and so does the request.
func (s *Server) boundBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(s.cfg.ReadBodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the connection's read deadline when its body has been
// read to the end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// The library answers a handshake of an Engine.IO version it does not
// serve with code 4, which is Forbidden's; Engine.IO's code for it is 5
// (UNSUPPORTED_PROTOCOL_VERSION), and tools that name the codes by
// Engine.IO's list read it as a refusal (a black-box audit against Node,
// 2026-12-07). Set once, before any server answers.
func init() { engine.UNSUPPORTED_PROTOCOL_VERSION.Code = 5 }
