// Package admin is the operators' panel (/admin): a login with the admin
// token, a JSON API under /admin/api/ and the pages of web/ that use it,
// live through server-sent events. In a cluster every node publishes its
// own figures to Redis and the panel of any node reads them all.
package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/defaults"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// Config configures the panel. Zero values mean the defaults.
type Config struct {
	Token        string        // required: the login token (PRESENCE_ADMIN_TOKEN)
	NodeID       string        // this node
	Prefix       string        // Redis key prefix, default "presence"
	PublishEvery time.Duration // stats sampling and publishing, and the pages' refresh, default 2s
	SessionTTL   time.Duration // default 12h
	LoginLimit   int           // wrong tokens per LoginWindow per IP, default 5
	LoginWindow  time.Duration // default 1m
	// MaxStreams bounds the open live streams (server-sent events) of the
	// node, default 100.
	MaxStreams int
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, "presence")
	c.PublishEvery = defaults.Positive(c.PublishEvery, 2*time.Second)
	c.SessionTTL = defaults.Positive(c.SessionTTL, 12*time.Hour)
	c.LoginLimit = defaults.Positive(c.LoginLimit, 5)
	c.LoginWindow = defaults.Positive(c.LoginWindow, time.Minute)
	c.MaxStreams = defaults.Positive(c.MaxStreams, 100)
	return c
}

// Check is a readiness check (the same as /readyz's).
type Check struct {
	Name  string
	Check func(context.Context) error
}

// Sockets is what the panel needs of the socket handlers.
type Sockets interface {
	Open() int64
	ClusterSockets(ctx context.Context, userID string) ([]handlers.LocalSocket, error)
	DisconnectUser(ctx context.Context, userID string) error
}

// Deps are what the panel reads.
type Deps struct {
	Log *slog.Logger
	// Registry: events/s are read from its presenced_events_total, and the
	// panel's own metrics are registered on it (nil: neither).
	Registry *prometheus.Registry
	Engine   presence.Reader
	View     presence.AdminView
	Reader   *lastseen.Reader
	Pipeline *lastseen.Pipeline
	Buffer   lastseen.Buffer
	Store    store.Store
	Redis    redis.UniversalClient // nil: one node in memory
	Ready    []Check
	Sockets  Sockets
}

// Panel is the admin panel of one node.
type Panel struct {
	cfg      Config
	d        Deps
	log      *slog.Logger
	sessions *sessions
	revoked  *revocations
	fails    *failures
	stats    *sampler
	streams  chan struct{}
	convs    *convIndex // cluster mode: the conversation list's snapshot

	logins      *prometheus.CounterVec // outcome
	disconnects prometheus.Counter

	pubMu     sync.Mutex
	pubFailed bool

	// ending is closed by EndStreams: the live streams end (shutdown).
	ending     chan struct{}
	endingOnce sync.Once
}

// EndStreams ends every live stream, and refuses new ones: call it when
// shutdown begins, or the HTTP server's graceful shutdown waits for them.
func (p *Panel) EndStreams() { p.endingOnce.Do(func() { close(p.ending) }) }

// New builds the panel.
func New(cfg Config, d Deps) (*Panel, error) {
	if cfg.Token == "" {
		return nil, errors.New("admin: a token is required")
	}
	if d.Log == nil || d.Engine == nil || d.View == nil || d.Reader == nil || d.Pipeline == nil || d.Store == nil || d.Sockets == nil {
		return nil, errors.New("admin: Log, Engine, View, Reader, Pipeline, Store and Sockets are required")
	}
	cfg = cfg.withDefaults()
	p := &Panel{
		cfg: cfg, d: d, log: d.Log,
		sessions: newSessions(cfg.Token, cfg.SessionTTL),
		revoked:  newRevocations(),
		fails:    newFailures(cfg.LoginLimit, cfg.LoginWindow),
		streams:  make(chan struct{}, cfg.MaxStreams),
		ending:   make(chan struct{}),
	}
	p.fails.rdb, p.fails.prefix = d.Redis, cfg.Prefix
	p.revoked.rdb, p.revoked.prefix = d.Redis, cfg.Prefix
	p.logins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "presenced_admin_logins_total",
		Help: "Admin panel logins by outcome: ok, wrong_token, rate_limited, forbidden (cross-origin).",
	}, []string{"outcome"})
	p.disconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "presenced_admin_disconnects_total",
		Help: "Users disconnected from the admin panel.",
	})
	for _, o := range []string{"ok", "wrong_token", "rate_limited", "forbidden"} {
		p.logins.WithLabelValues(o)
	}
	if d.Registry != nil {
		if err := d.Registry.Register(p.logins); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		if err := d.Registry.Register(p.disconnects); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	if d.Redis != nil {
		p.convs = &convIndex{view: d.View, every: cfg.PublishEvery}
	}
	p.stats = &sampler{node: cfg.NodeID, sockets: d.Sockets.Open, events: p.eventsTotal, flush: p.flushView}
	p.stats.last = NodeStats{Node: cfg.NodeID, At: time.Now().UTC()} // until Run's first sample
	return p, nil
}

// eventsTotal sums presenced_events_total.
func (p *Panel) eventsTotal() float64 {
	if p.d.Registry == nil {
		return 0
	}
	mfs, err := p.d.Registry.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "presenced_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Run samples this node every PublishEvery and, in a cluster, publishes
// the figures to Redis, until ctx ends.
func (p *Panel) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.PublishEvery)
	defer t.Stop()
	for {
		st := p.stats.sample(time.Now())
		if p.convs != nil {
			p.convs.maybeRefresh(ctx)
		}
		if p.d.Redis != nil {
			pctx, cancel := context.WithTimeout(ctx, p.cfg.PublishEvery)
			err := p.publish(pctx, st)
			cancel()
			p.pubMu.Lock()
			switch {
			case err != nil && ctx.Err() == nil && !p.pubFailed:
				p.pubFailed = true
				p.log.Warn("admin stats not published", "err", err)
			case err == nil && p.pubFailed:
				p.pubFailed = false
				p.log.Info("admin stats published again")
			}
			p.pubMu.Unlock()
		}
		select {
		case <-ctx.Done():
			if p.d.Redis != nil {
				p.unpublish()
			}
			return nil
		case <-t.C:
		}
	}
}

// Handler serves the panel; mount it at /admin.
func (p *Panel) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(secureHeaders)
	r.Get("/", p.index)
	r.Get("/login", p.loginPage)
	r.Post("/login", p.loginForm)
	r.Post("/logout", p.logout)
	r.Get("/static/*", p.static)
	// (without its own, the server's answered with the methods of the
	// whole /admin mount: every one, PUT for a PUT too)
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		path := req.URL.Path // not mounted (the tests)
		if rctx := chi.RouteContext(req.Context()); rctx != nil && rctx.RoutePath != "" {
			path = rctx.RoutePath
		}
		handlers.WriteMethodNotAllowed(w, req, r, path)
	})
	r.Route("/api", func(r chi.Router) {
		r.Post("/login", p.loginJSON)
		r.Group(func(r chi.Router) {
			r.Use(p.requireSession)
			r.Get("/session", p.session)
			r.Get("/openapi.json", p.openapi)
			r.Get("/stream", p.stream)
			for name, v := range p.views() {
				r.Get("/"+name, p.serveView(v))
			}
			r.Post("/users/disconnect", p.disconnect)
		})
		r.NotFound(p.requireSession(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			handlers.WriteError(w, http.StatusNotFound, "not_found", "no such admin API route")
		})).ServeHTTP)
		r.MethodNotAllowed(p.requireSession(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			handlers.WriteError(w, http.StatusMethodNotAllowed, handlers.CodeInvalidArgument, "method not allowed")
		})).ServeHTTP)
	})
	return r
}
