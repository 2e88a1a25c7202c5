package handlers

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// OpenAPI is the OpenAPI 3.0.3 document of the REST API (served at
// GET /v1/openapi.json).
//
//go:embed openapi.json
var OpenAPI []byte

// Limits of the REST API (CONTRACT §2).
const (
	// MaxBodyBytes bounds the body of a user request; larger bodies get 413.
	MaxBodyBytes = 64 << 10
	// MaxServiceBodyBytes bounds the body of a service request: a list of
	// store.MaxIDs ids of up to 128 characters must fit.
	MaxServiceBodyBytes = 2 << 20
	// MaxQueryIDs bounds the ids of a user query (POST /presence/query).
	MaxQueryIDs = 1000
	// MaxServiceIDs bounds the ids of a service list (members, contacts).
	MaxServiceIDs = store.MaxIDs
	// DefaultRateLimit is the requests allowed per DefaultRateWindow per
	// user, for the service token, and per client address for requests
	// that fail authentication.
	DefaultRateLimit  = 600
	DefaultRateWindow = time.Minute
	// serviceTimeout bounds a service write and the eviction that follows
	// it; they do not stop when the client goes away.
	serviceTimeout = 10 * time.Second
)

// PresenceReader answers privacy-filtered presence queries;
// *lastseen.Reader satisfies it.
type PresenceReader interface {
	Presences(ctx context.Context, viewerID string, userIDs []string) ([]lastseen.Presence, error)
}

// RosterReader tells who is online and typing in a conversation;
// presence.Reader satisfies it.
type RosterReader interface {
	Roster(ctx context.Context, conversationID string) (presence.JoinResult, error)
}

var (
	_ PresenceReader = (*lastseen.Reader)(nil)
	_ RosterReader   = presence.Reader(nil)
)

// RESTDeps are what the REST API calls.
type RESTDeps struct {
	Log      *slog.Logger // nil: discard
	Verifier auth.Verifier
	// ServiceToken is the bearer token of /v1/service/*; "" turns those
	// routes off (they answer 404).
	ServiceToken string
	Presences    PresenceReader
	Rosters      RosterReader
	Store        store.Store // privacy, contacts, members
	// Membership decides who may read a conversation's presence; nil: the
	// store's membership. When it has a Forget(conversationID) method
	// (presence.CachedMembership) it is called after the member list of a
	// conversation is replaced.
	Membership presence.Membership
	// Settings gives rosters the users' last-seen settings (times only for
	// everyone, CONTRACT §1); nil: a cache over Store.
	Settings Settings
	// SettingSaved, when set, is called once a user's new setting is
	// saved, before anything else learns it: the presence readers' caches
	// of settings read it again (lastseen.Reader.SettingChanged). Its
	// error fails the request (503), which the client retries; the setting
	// stays saved.
	SettingSaved func(ctx context.Context, userID string) error
	// PrivacyChanged, when set, is told of a user's new setting once it is
	// saved (and Settings updated): the other nodes' caches learn it.
	PrivacyChanged func(ctx context.Context, userID string, v store.Visibility)
	// ContactsChanged, when set, is told of a user whose contact list was
	// replaced, once it is saved.
	ContactsChanged func(ctx context.Context, userID string)
	// Evict is called after every SetMembers with the removed users (maybe
	// none): every node forgets its cached membership of the conversation
	// and removes those users' sockets from it. nil: not called.
	Evict func(ctx context.Context, conversationID string, userIDs []string) error
	// RateLimit is the requests allowed per RateWindow per user, for the
	// service token, and per client address for unauthenticated requests;
	// 0 means DefaultRateLimit, negative turns rate limiting off.
	RateLimit  int
	RateWindow time.Duration // 0: DefaultRateWindow
}

// REST is the /v1 HTTP API (CONTRACT §2).
type REST struct {
	d        RESTDeps
	log      *slog.Logger
	limiter  *httprate.RateLimiter // nil: off
	svcHash  [sha256.Size]byte
	router   *chi.Mux
	notFound http.HandlerFunc
}

// NewREST builds the API over d.
func NewREST(d RESTDeps) *REST {
	a := &REST{d: d, log: d.Log}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.d.Membership == nil && d.Store != nil {
		a.d.Membership = d.Store
	}
	if a.d.Settings == nil && d.Store != nil {
		a.d.Settings = lastseen.NewSettings(d.Store, lastseen.SettingsConfig{})
	}
	if d.ServiceToken != "" {
		a.svcHash = sha256.Sum256([]byte(d.ServiceToken))
	}
	limit, window := d.RateLimit, d.RateWindow
	if limit == 0 {
		limit = DefaultRateLimit
	}
	if window <= 0 {
		window = DefaultRateWindow
	}
	if limit > 0 {
		a.limiter = httprate.NewRateLimiter(limit, window,
			httprate.WithLimitHandler(func(w http.ResponseWriter, _ *http.Request) {
				if w.Header().Get("Retry-After") == "" {
					w.Header().Set("Retry-After", fmt.Sprint(int((window+time.Second-1)/time.Second)))
				}
				WriteError(w, http.StatusTooManyRequests, CodeRateLimited, "too many requests; retry later")
			}),
			httprate.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				a.log.Error("rate limiter failed", "err", err)
				WriteError(w, http.StatusInternalServerError, CodeInternal, "internal error")
			}),
		)
	}
	a.notFound = func(w http.ResponseWriter, _ *http.Request) {
		WriteError(w, http.StatusNotFound, CodeNotFound, "no such route")
	}
	a.router = a.routes()
	return a
}

// Routes returns the API's router, to be mounted at /v1. Every answer,
// errors and unknown routes included, is JSON.
func (a *REST) Routes() chi.Router { return a.router }

func (a *REST) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(Recover(a.log))
	r.NotFound(a.notFound)
	r.MethodNotAllowed(a.methodNotAllowed)

	r.Get("/openapi.json", a.openAPI)

	r.Group(func(r chi.Router) {
		r.Use(a.userAuth)
		r.Get("/users/{userId}/presence", a.userPresence)
		r.Post("/presence/query", a.queryPresence)
		r.Get("/conversations/{conversationId}/presence", a.conversationPresence)
		r.Get("/me/privacy", a.getPrivacy)
		r.Put("/me/privacy", a.putPrivacy)
	})
	r.Group(func(r chi.Router) {
		r.Use(a.serviceAuth)
		r.Put("/service/conversations/{conversationId}/members", a.setMembers)
		r.Put("/service/users/{userId}/contacts", a.setContacts)
	})
	return r
}

// restMethods are the methods tried to fill the Allow header of a 405.
var restMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// methodNotAllowed answers a known path asked with the wrong method: 405
// with an Allow header and code invalid_argument (the contract has no
// code of its own for it). The service routes stay 404 while they are off.
func (a *REST) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath != "" {
		path = rctx.RoutePath
	}
	if a.d.ServiceToken == "" && strings.HasPrefix(path, "/service/") {
		a.notFound(w, r)
		return
	}
	WriteMethodNotAllowed(w, r, a.router, path)
}

// WriteMethodNotAllowed answers r, whose path (as routes sees it) routes
// serves with other methods: 405 with an Allow header naming them, and
// code invalid_argument. The REST API and the server's own routes
// (/healthz, /readyz) answer alike.
func WriteMethodNotAllowed(w http.ResponseWriter, r *http.Request, routes chi.Routes, path string) {
	var allowed []string
	for _, m := range restMethods {
		if routes.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
	}
	WriteError(w, http.StatusMethodNotAllowed, CodeInvalidArgument,
		fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, strings.Join(allowed, ", ")))
}

func (a *REST) openAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(OpenAPI)
}
