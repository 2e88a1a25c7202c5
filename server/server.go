// Package server is the HTTP server: a chi router that mounts Socket.IO at
// /socket.io/, health and metrics endpoints, the handshake's authentication,
// CORS and rate limiting, and the graceful shutdown sequence.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/zishang520/socket.io/servers/engine/v3"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/defaults"
	"github.com/presenced/presenced/internal/throttle"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/transport"
)

// Config configures the HTTP and Socket.IO server. Zero values mean the
// documented defaults (CONTRACT §4).
type Config struct {
	PingInterval    time.Duration // Engine.IO ping interval, default 25s
	PingTimeout     time.Duration // Engine.IO ping timeout, default 20s
	MaxBuffer       int64         // Engine.IO maxHttpBufferSize in bytes, default 100 KiB
	AllowEIO3       bool          // accept Engine.IO v3 clients (socket.io-client 2.x)
	CORSOrigins     []string      // allowed browser origins; "*" allows any
	HandshakeLimit  int           // handshakes per HandshakeWindow per IP; 0 disables
	HandshakeWindow time.Duration // default 10s
	ShutdownTimeout time.Duration // default 20s
	// MaxUnread bounds the bytes a socket's client has not taken yet; over
	// it the socket is disconnected (default 1 MiB, negative: no bound).
	// MaxUnreadAge does the same for data that has waited that long
	// (default 30s, negative: no bound); it is also each websocket write's
	// deadline.
	MaxUnread    int64
	MaxUnreadAge time.Duration
	// TrustedProxies are the load balancers whose X-Forwarded-For is
	// believed (per-IP limits, logs); from anyone else it is ignored.
	TrustedProxies []netip.Prefix
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers (slow-header clients), default 10s; IdleTimeout how
	// long a keep-alive connection may wait for its next request, default
	// 2m. Neither applies to a websocket once upgraded.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// ReadBodyTimeout bounds how long a request's body may take to arrive
	// once its headers have (default 30s): a client that sends part of a
	// body and then nothing holds its connection and a goroutine no longer
	// than that, and cannot hold up a shutdown.
	ReadBodyTimeout time.Duration
	// Parser is the Socket.IO parser every client uses: "json" (default)
	// or "msgpack" (socket.io-msgpack-parser, MsgpackParser).
	Parser string
	// Adapter, when set, carries rooms across nodes (cluster mode).
	Adapter socket.AdapterConstructor
	// LibraryWebsocket selects the Socket.IO library's own websocket
	// transport instead of ours (wstransport.go); for comparisons.
	LibraryWebsocket bool
}

func (c Config) withDefaults() Config {
	c.PingInterval = defaults.Positive(c.PingInterval, 25*time.Second)
	c.PingTimeout = defaults.Positive(c.PingTimeout, 20*time.Second)
	c.MaxBuffer = defaults.Positive(c.MaxBuffer, 100<<10)
	c.HandshakeWindow = defaults.Positive(c.HandshakeWindow, 10*time.Second)
	c.ShutdownTimeout = defaults.Positive(c.ShutdownTimeout, 20*time.Second)
	c.MaxUnread = cmp.Or(c.MaxUnread, 1<<20)
	c.MaxUnreadAge = cmp.Or(c.MaxUnreadAge, 30*time.Second)
	c.ReadHeaderTimeout = defaults.Positive(c.ReadHeaderTimeout, 10*time.Second)
	c.IdleTimeout = defaults.Positive(c.IdleTimeout, 2*time.Minute)
	c.ReadBodyTimeout = defaults.Positive(c.ReadBodyTimeout, 30*time.Second)
	return c
}

// Check is a readiness probe of one dependency (a store, Redis).
type Check struct {
	Name  string
	Check func(context.Context) error
}

// Deps are what the server is wired to.
type Deps struct {
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	Verifier auth.Verifier
	Sockets  *handlers.Sockets
	Ready    []Check
	// API, when set, is mounted at /v1 (the REST API).
	API http.Handler
	// Admin, when set, is mounted at /admin (the admin panel).
	Admin http.Handler
}

// Server is one node's HTTP server.
type Server struct {
	cfg      Config
	deps     Deps
	log      *slog.Logger
	io       *socket.Server
	router   chi.Router
	draining atomic.Bool
	gate     *connectGate
	conns    sync.Map // Engine.IO connection id → *connRecord (connRecordOf)
	posting  sync.Map // long-polling session id → struct{}: a POST of it under way (refuseOverlappingPosts)
	// handshakes is the per-IP handshake limit (nil: none), shared by the
	// Engine.IO handshakes (limitHandshakes) and the CONNECTs after a
	// connection's first (authenticate)
	handshakes *httprate.RateLimiter

	readyMu   sync.Mutex
	readyLogs map[string]*throttle.Log // check name → its failures' log (readyz)
}

// New builds the server; it does not listen yet.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Log == nil || deps.Metrics == nil || deps.Verifier == nil || deps.Sockets == nil {
		return nil, errors.New("server: Log, Metrics, Verifier and Sockets are required")
	}
	s := &Server{cfg: cfg.withDefaults(), deps: deps, log: deps.Log.With("component", "server")}
	s.handshakes = s.newHandshakeLimiter()
	s.io = s.newSocketIO()
	s.router = s.routes()
	return s, nil
}

// IO is the Socket.IO server (for wiring adapters and emitting from tests).
func (s *Server) IO() *socket.Server { return s.io }

// Handler is the root HTTP handler.
func (s *Server) Handler() http.Handler { return s.router }

func (s *Server) newSocketIO() *socket.Server {
	opts := socket.DefaultServerOptions()
	opts.SetServeClient(false)
	opts.SetPingInterval(s.cfg.PingInterval)
	opts.SetPingTimeout(s.cfg.PingTimeout)
	opts.SetMaxHttpBufferSize(s.cfg.MaxBuffer)
	opts.SetAllowEIO3(s.cfg.AllowEIO3)
	opts.SetPath("/socket.io")
	if s.cfg.Adapter != nil {
		opts.SetAdapter(s.cfg.Adapter)
	} else {
		// one node: the library's in-memory adapter, with broadcasts
		// encoded once for all their recipients
		opts.SetAdapter(transport.LocalAdapterBuilder{})
	}
	if s.cfg.Parser == "msgpack" {
		// Every packet is then a binary message: our websocket transport
		// hands them all to the library (it takes only text EVENTs of the
		// JSON parser directly, and none with this one: BinaryPackets).
		opts.SetParser(transport.MsgpackParser{})
	} else {
		opts.SetParser(transport.NewJSONParser()) // the library's, on lean emitters
	}
	// The origin allow-list is enforced by our middleware in front of the
	// engine, for every transport (middleware.go: a refused origin never
	// reaches the engine). The engine is told to accept whatever reaches it:
	// without a CORS option its websocket upgrader refuses every
	// cross-origin upgrade.
	opts.SetCors(&types.Cors{Origin: true, Credentials: true})
	var ws *transport.Websocket
	if !s.cfg.LibraryWebsocket {
		ws = transport.NewWebsocket(transport.WebsocketConfig{
			Dispatcher: s.deps.Sockets, PingInterval: s.cfg.PingInterval, PingTimeout: s.cfg.PingTimeout,
			MaxMessage: s.cfg.MaxBuffer, WriteWait: max(s.cfg.MaxUnreadAge, 0),
			SendBuffer: wsSendBuffer(s.cfg), InlineEvents: handlers.InlineEvents(),
			BinaryPackets: s.cfg.Parser == "msgpack",
			BeforeUpgrade: s.awaitPost,
		})
		opts.SetTransports(types.NewSet[engine.TransportCtor](engine.Polling, ws))
	}
	io := socket.NewServer(nil, opts)
	var busy func() bool
	if ws != nil {
		procs := runtime.GOMAXPROCS(0)
		busy = func() bool { return ws.EventsInFlight() >= procs }
	}
	s.gate = newConnectGate(busy)
	if ws != nil {
		io.ServeHandler(nil) // creates the engine (routes reuses it)
		ws.Attach(io.Engine())
	}
	io.Use(s.authenticate)
	io.On("connection", func(args ...any) {
		if sock, ok := args[0].(*socket.Socket); ok {
			s.deps.Sockets.Connect(sock)
			s.gate.leaveFor(string(sock.Id()))
		}
	})
	return io
}

// wsSendBuffer is the kernel send buffer of each websocket connection
// while an unread bound applies: 64 KiB, which Linux doubles, so that what
// a client leaves unread in the kernel adds at most 128 KiB to the bound
// the transport's queue keeps, and a write blocks (its deadline is
// MaxUnreadAge) once that much waits. Delivery is not slowed by it: at
// 128 KiB per round trip a socket takes over 1 MB/s on a 100 ms path,
// far beyond what presence sends one client.
func wsSendBuffer(c Config) int {
	if c.MaxUnread <= 0 && c.MaxUnreadAge <= 0 {
		return 0 // no bound: the kernel's own sizing
	}
	return 64 << 10
}

// verifyTimeout bounds a handshake's token check (a JWKS refresh included).
const verifyTimeout = 5 * time.Second

// maxRefusals is how many refused CONNECTs one Engine.IO connection may
// make before it is closed. A client may try again on the same connection
// with a new token (socket.auth, then socket.connect()); thousands a second
// on one connection, each a token check that the per-IP handshake limit
// never sees, are no client's.
const maxRefusals = 10

// connRecord is what the server keeps of an Engine.IO connection's
// CONNECTs, from its first until it closes.
type connRecord struct {
	connects atomic.Int32 // CONNECTs made
	refused  atomic.Int32 // CONNECTs refused (maxRefusals)
	ipKey    string       // the client's address, as the handshake limit counts it
}

// connRecordFound returns the record of sock's connection, or nil.
func (s *Server) connRecordFound(sock *socket.Socket) *connRecord {
	if v, ok := s.conns.Load(string(sock.Conn().Id())); ok {
		return v.(*connRecord)
	}
	return nil
}

// connRecordOf returns the record of sock's connection, made at its first
// CONNECT while a handshake limit applies (when the handshake's request is
// still there to read the client's address from), or else at its first
// refused CONNECT, and dropped when the connection closes.
func (s *Server) connRecordOf(sock *socket.Socket) *connRecord {
	conn := sock.Conn()
	id := string(conn.Id())
	if v, ok := s.conns.Load(id); ok {
		return v.(*connRecord)
	}
	rec := &connRecord{}
	if ctx := conn.Request(); ctx != nil && ctx.Request() != nil {
		rec.ipKey = handlers.ClientIP(ctx.Request())
	}
	if conn.ReadyState() != "open" {
		return rec // closed: its close hook has run, nothing would drop it
	}
	v, _ := s.conns.LoadOrStore(id, rec) // dropped by authenticate's close hook
	return v.(*connRecord)
}

// reconnectLimited reports whether a CONNECT after the first on its
// connection is over the per-IP handshake limit, and counts it: a client
// that connects and disconnects its namespace over and over on one
// Engine.IO connection makes a full handshake (a token check, the
// socket's setup) each time, which the limit on Engine.IO handshakes alone
// never saw (hundreds a second on one connection).
func (s *Server) reconnectLimited(rec *connRecord) bool {
	if rec == nil || s.handshakes == nil || rec.connects.Add(1) == 1 || rec.ipKey == "" {
		return false
	}
	return s.handshakes.OnLimit(discardHeaders{}, &http.Request{}, rec.ipKey)
}

// discardHeaders is a ResponseWriter for a limiter asked outside a request.
type discardHeaders struct{}

func (discardHeaders) Header() http.Header         { return http.Header{} }
func (discardHeaders) Write(p []byte) (int, error) { return len(p), nil }
func (discardHeaders) WriteHeader(int)             {}

// authenticate is the Socket.IO namespace middleware that verifies the
// handshake token (CONTRACT §1). A refusal reaches the client as
// connect_error with message "unauthorized" and data {code, reason}. A
// connection's CONNECT after maxRefusals refused ones closes it.
func (s *Server) authenticate(sock *socket.Socket, next func(*socket.ExtendedError)) {
	rec := s.connRecordFound(sock)
	if rec != nil && rec.refused.Load() >= maxRefusals {
		s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeUnauthorized).Inc()
		s.log.Info("connection closed after refused CONNECTs", "refused", maxRefusals, "ip", sock.Handshake().Address)
		sock.Conn().Close(true)
		next(socket.NewExtendedError("unauthorized", map[string]any{"code": "unauthorized", "reason": "too many refused connects"}))
		return
	}
	if s.handshakes != nil {
		rec = s.connRecordOf(sock)
	}
	if s.reconnectLimited(rec) {
		s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeRateLimited).Inc()
		s.connRecordOf(sock).refused.Add(1)
		next(socket.NewExtendedError("unauthorized", map[string]any{"code": "unauthorized", "reason": "too many handshakes from this address"}))
		return
	}
	// Nothing else has this socket yet (the namespace adds it once the
	// middlewares are done): its emitter can still be ours.
	transport.SetSocketEmitter(sock)
	leave := s.gate.enter()
	sid := string(sock.Id())
	s.gate.hold(sid, leave)
	// given back when Connect has run ("connection"), or here on a refusal,
	// or when the connection closes before that; the same hook drops the
	// connection's record (connRecordOf: every record is made by a CONNECT
	// that comes by here, or by one that came by before it)
	connID := string(sock.Conn().Id())
	closed := func(...any) {
		s.gate.leaveFor(sid)
		s.conns.Delete(connID)
	}
	_ = sock.Conn().Once("close", closed)
	if sock.Conn().ReadyState() != "open" { // closed before the hook was set
		closed()
	}
	refused := true
	defer func() {
		if refused {
			s.gate.leaveFor(sid)
		}
	}()
	token, inURL := handshakeToken(sock)
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	defer cancel()
	claims, err := s.deps.Verifier.Verify(ctx, token)
	if err != nil {
		s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeUnauthorized).Inc()
		reason := auth.Reason(err)
		s.log.Debug("handshake refused", "reason", reason, "err", err)
		next(socket.NewExtendedError("unauthorized", map[string]any{
			"code":   "unauthorized",
			"reason": reason,
		}))
		s.connRecordOf(sock).refused.Add(1)
		return
	}
	if err := s.deps.Sockets.Prepare(sock, claims); err != nil {
		s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeUnauthorized).Inc()
		next(socket.NewExtendedError("unauthorized", map[string]any{
			"code":   "unauthorized",
			"reason": handlers.RefusalReason(err),
		}))
		s.connRecordOf(sock).refused.Add(1)
		return
	}
	s.deps.Metrics.Handshakes.WithLabelValues(metrics.HandshakeOK).Inc()
	// The token is a credential, and nothing reads it after this: the
	// handshake would keep it for the connection's life (0.5 KB per socket)
	// and hand it to other nodes in fetchSockets answers.
	if h := sock.Handshake(); h != nil {
		delete(h.Auth, "token")
		if len(h.Auth) == 0 {
			h.Auth = nil
		}
		if inURL {
			dropURLToken(h)
		}
		var host string
		if hc := sock.Request(); hc != nil && hc.Request() != nil {
			host = hc.Request().Host
		}
		compactHandshake(h, host)
	}
	conn, user := sock.Conn(), claims.UserID
	transport.WatchConn(conn, s.cfg.MaxUnread, s.cfg.MaxUnreadAge, func(why string, pending int64) {
		s.deps.Metrics.SlowConsumerDisconnects.Inc()
		s.log.Warn("slow consumer disconnected", "user_id", user, "sid", string(sock.Id()), "why", why, "unread_bytes", pending)
		conn.Close(true)
	})
	// The handshake is copied into sock: nothing reads the connection's
	// request any more. Released here, on the connection's reader, which
	// would also read it for a later CONNECT.
	transport.ReleaseRequest(conn)
	refused = false
	next(nil)
}

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(handlers.Recover(s.log), s.boundBody)
	if len(s.cfg.TrustedProxies) > 0 {
		// The client is the first address, from the right, that is not a
		// trusted proxy; a peer that is not one is the client itself, and
		// its X-Forwarded-For is ignored (handlers.ClientIP reads it).
		trusted := make([]string, len(s.cfg.TrustedProxies))
		for i, p := range s.cfg.TrustedProxies {
			trusted[i] = p.String()
		}
		r.Use(middleware.ClientIPFromXFF(trusted...))
	}

	ioHandler := releaseOnHijack(s.io.ServeHandler(nil))
	r.Group(func(r chi.Router) {
		r.Use(s.cors, s.rejectWhileDraining, s.limitHandshakes, s.refuseOverlappingPosts, s.capPollingBody, s.closeOnBadPollingPayload, s.refuseWebsocketReupgrade)
		r.Handle("/socket.io", ioHandler)
		r.Handle("/socket.io/*", ioHandler)
	})

	if s.deps.API != nil {
		r.With(s.restCORS).Mount("/v1", s.deps.API)
	}
	if s.deps.Admin != nil {
		r.Mount("/admin", s.deps.Admin)
	}

	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		handlers.WriteError(w, http.StatusNotFound, "not_found", "no such route")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		handlers.WriteMethodNotAllowed(w, req, r, req.URL.Path)
	})

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		handlers.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	r.Handle("/metrics", s.deps.Metrics.Handler())
	return r
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		handlers.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	status := http.StatusOK
	for _, c := range s.deps.Ready {
		err := c.Check(ctx)
		s.logReadiness(c.Name, err)
		if err != nil {
			// The probe is public: its answer names no address, user or
			// driver message; the log has the error.
			checks[c.Name] = "unavailable"
			status = http.StatusServiceUnavailable
		} else {
			checks[c.Name] = "ok"
		}
	}
	word := "ok"
	if status != http.StatusOK {
		word = "unavailable"
	}
	handlers.WriteJSON(w, status, map[string]any{"status": word, "checks": checks})
}

// logReadiness logs a readiness check's failure once, then once per 10 s
// with the failures counted meanwhile, and its recovery: a balancer probes
// every node every few seconds, and each probe logged a line before.
func (s *Server) logReadiness(name string, err error) {
	s.readyMu.Lock()
	l := s.readyLogs[name]
	if l == nil {
		if err == nil {
			s.readyMu.Unlock()
			return
		}
		if s.readyLogs == nil {
			s.readyLogs = map[string]*throttle.Log{}
		}
		l = &throttle.Log{Every: 10 * time.Second}
		s.readyLogs[name] = l
	}
	var n int
	var log bool
	if err != nil {
		n, log = l.Fail(time.Now())
	} else {
		n, log = l.Recover()
	}
	s.readyMu.Unlock()
	switch {
	case log && err != nil:
		s.log.Warn("readiness check failed", "check", name, "err", err, "failed_checks", n)
	case log:
		s.log.Info("readiness check recovered", "check", name, "failed_checks", n)
	}
}

// MaxHeaderBytes bounds a request's line and headers (net/http answers
// 431 past it, with its 4 KiB of slack). net/http's default, 1 MiB, let an
// abandoned long-polling handshake keep a megabyte (its request is kept
// until the session times out, 45 s) and a websocket that never connects
// keep a megabyte of a header it hands the engine: 2,000 of either from
// 20 addresses held 2 GB (a resource audit, 2026-12-07). A browser's
// cookies and a token in the query fit.
const MaxHeaderBytes = 64 << 10

// Serve serves on ln until ctx ends, then shuts down gracefully: new
// handshakes are refused, every socket is disconnected (its disconnect work
// runs once), and in-flight HTTP requests finish, all within half of
// ShutdownTimeout (the caller's final work has the rest). A request still
// running then (a client that stopped sending its body) has its connection
// closed: the shutdown is clean whatever a client does.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.router,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		cctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		s.closeSockets(cctx)
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}

	s.log.Info("shutting down", "sockets", s.deps.Sockets.Open())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout/2)
	defer cancel()
	s.draining.Store(true)
	s.closeSockets(sctx)
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("requests still in flight at the shutdown deadline; their connections are closed", "err", err)
		_ = hs.Close()
	}
	<-errc
	return nil
}

// closeSockets disconnects every socket (running its disconnect handlers)
// and closes the engine, which ends long-polling requests and websockets.
// It gives up when ctx ends: whatever a connection does, shutdown keeps to
// ShutdownTimeout (the listener's Close then cuts what is left).
func (s *Server) closeSockets(ctx context.Context) {
	before := s.deps.Sockets.Open()
	done := make(chan struct{})
	go s.io.Close(func(error) { close(done) })
	select {
	case <-done:
		s.log.Info("sockets closed", "sockets_disconnected", before-s.deps.Sockets.Open(), "sockets_open", s.deps.Sockets.Open())
	case <-ctx.Done():
		s.log.Warn("sockets not all closed within the shutdown timeout", "sockets_disconnected", before-s.deps.Sockets.Open(), "sockets_open", s.deps.Sockets.Open())
	}
}
