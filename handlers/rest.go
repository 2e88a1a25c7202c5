package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/ids"
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
	// PrivacyChanged, when set, is told of a user's new setting once it is
	// saved (and Settings updated): the other nodes' caches learn it.
	PrivacyChanged func(ctx context.Context, userID string, v store.Visibility)
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

// ---- responses

// WriteJSON writes v as a JSON answer (no-store, nosniff); a value that
// cannot be encoded becomes a 500 with the error shape. The server, the
// REST handlers and the admin API all answer through it.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError writes the contract's error shape {"error":{"code","message"}}.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	WriteJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

// fail answers err with its contract code and status; internal and
// unavailable errors are logged (their message to the client is generic).
func (a *REST) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := classify(err)
	switch e.Code {
	case CodeInternal:
		a.log.Error("rest request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case CodeUnavailable:
		a.log.Warn("rest request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	WriteError(w, HTTPStatus(e.Code), e.Code, e.Message)
}

func (a *REST) unauthorized(w http.ResponseWriter, reason string, tokenGiven bool) {
	challenge := `Bearer realm="presenced"`
	if tokenGiven {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	WriteError(w, http.StatusUnauthorized, CodeUnauthorized, reason)
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
	var allowed []string
	for _, m := range restMethods {
		if a.router.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
	}
	WriteError(w, http.StatusMethodNotAllowed, CodeInvalidArgument,
		fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, strings.Join(allowed, ", ")))
}

// ---- authentication and rate limiting

type viewerKey struct{}

func viewerOf(ctx context.Context) string { s, _ := ctx.Value(viewerKey{}).(string); return s }

// bearer returns the token of the Authorization header, whether the header
// was given, and a reason when it is not a bearer token.
func bearer(r *http.Request) (token string, given bool, reason string) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return "", false, "missing token"
	}
	scheme, rest, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", true, "authorization scheme must be Bearer"
	}
	token = strings.TrimSpace(rest)
	if token == "" {
		return "", true, "missing token"
	}
	return token, true, ""
}

// isServiceToken compares in constant time (over fixed-size digests, so
// the length does not leak either).
func (a *REST) isServiceToken(token string) bool {
	if a.d.ServiceToken == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], a.svcHash[:]) == 1
}

// limited counts a request against key and answers 429 when over the
// limit.
func (a *REST) limited(w http.ResponseWriter, r *http.Request, key string) bool {
	if a.limiter == nil {
		return false
	}
	return a.limiter.RespondOnLimit(w, r, key)
}

// ClientIP is the address per-IP limits and logs name: the one resolved
// from X-Forwarded-For by chi's ClientIPFromXFF when the request came
// through a trusted proxy (PRESENCE_TRUSTED_PROXIES), else the
// connection's remote address.
func ClientIP(r *http.Request) string {
	if ip := middleware.GetClientIP(r.Context()); ip != "" {
		return httprate.CanonicalizeIP(ip)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(host)
}

// refuse answers 401, unless the client address is over its limit (429).
func (a *REST) refuse(w http.ResponseWriter, r *http.Request, reason string, given bool) {
	if a.limited(w, r, "ip:"+ClientIP(r)) {
		return
	}
	a.unauthorized(w, reason, given)
}

// userAuth requires a user JWT; the viewer is its sub.
func (a *REST) userAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, given, reason := bearer(r)
		if reason != "" {
			a.refuse(w, r, reason, given)
			return
		}
		if a.isServiceToken(token) {
			a.refuse(w, r, "the service token is not accepted here; use a user token", true)
			return
		}
		claims, err := a.d.Verifier.Verify(r.Context(), token)
		if err != nil {
			a.refuse(w, r, auth.Reason(err), true)
			return
		}
		if a.limited(w, r, "user:"+claims.UserID) {
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewerKey{}, claims.UserID)))
	})
}

// serviceAuth requires the service token; without one configured the
// service routes do not exist (404).
func (a *REST) serviceAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.d.ServiceToken == "" {
			a.notFound(w, r)
			return
		}
		token, given, reason := bearer(r)
		if reason != "" {
			a.refuse(w, r, reason, given)
			return
		}
		if !a.isServiceToken(token) {
			reason := "invalid service token"
			if _, err := a.d.Verifier.Verify(r.Context(), token); err == nil {
				reason = "a user token is not accepted here; use the service token"
			}
			a.refuse(w, r, reason, true)
			return
		}
		if a.limited(w, r, "service") {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ---- request decoding

// pathID reads and validates an id path parameter.
func pathID(r *http.Request, name string) (string, error) {
	raw := chi.URLParam(r, name)
	id, err := url.PathUnescape(raw)
	if err != nil || !ids.Valid(id) {
		return "", errorf(CodeInvalidArgument, "%s must be %s", name, ids.Rule)
	}
	return id, nil
}

// readObject reads a body of at most limit bytes that must be exactly one
// JSON object (unknown fields are the caller's to ignore).
func readObject(w http.ResponseWriter, r *http.Request, limit int64) (map[string]json.RawMessage, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, errorf(CodeLimitExceeded, "request body is larger than %d bytes", limit)
		}
		return nil, errorf(CodeInvalidArgument, "unreadable request body")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errorf(CodeInvalidArgument, "request body must be a JSON object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil, errorf(CodeInvalidArgument, "request body is not valid JSON: %s", jsonProblem(err))
	}
	return obj, nil
}

// jsonProblem is a short client-safe description of a JSON syntax error.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return "malformed"
}

// checkIDCount bounds the length of a list of ids (REST bodies and socket
// payloads alike): over the maximum is limit_exceeded.
func checkIDCount(field string, n, minN, maxN int) error {
	if n > maxN {
		return errorf(CodeLimitExceeded, "%s has %d ids; at most %d allowed", field, n, maxN)
	}
	if n < minN {
		return errorf(CodeInvalidArgument, "%s must hold at least %d id", field, minN)
	}
	return nil
}

// idList reads field as an array of ids, with between min and max
// elements (more than max is 413 limit_exceeded).
func idList(obj map[string]json.RawMessage, field string, minN, maxN int) ([]string, error) {
	raw, ok := obj[field]
	if !ok {
		return nil, errorf(CodeInvalidArgument, "%s is required", field)
	}
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errorf(CodeInvalidArgument, "%s must be an array of strings", field)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errorf(CodeInvalidArgument, "%s must be an array of strings", field)
	}
	if err := checkIDCount(field, len(items), minN, maxN); err != nil {
		return nil, err
	}
	list := make([]string, len(items))
	for i, it := range items {
		if len(it) == 0 || it[0] != '"' {
			return nil, errorf(CodeInvalidArgument, "%s[%d] must be a string", field, i)
		}
		if err := json.Unmarshal(it, &list[i]); err != nil {
			return nil, errorf(CodeInvalidArgument, "%s[%d] must be a string", field, i)
		}
		if !ids.Valid(list[i]) {
			return nil, errorf(CodeInvalidArgument, "%s[%d] must be %s", field, i, ids.Rule)
		}
	}
	return list, nil
}

// ---- handlers

func (a *REST) openAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(OpenAPI)
}

// GET /users/{userId}/presence
func (a *REST) userPresence(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "userId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ps, err := a.d.Presences.Presences(r.Context(), viewerOf(r.Context()), []string{id})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(ps) != 1 {
		a.fail(w, r, fmt.Errorf("rest: %d presences for 1 user", len(ps)))
		return
	}
	WriteJSON(w, http.StatusOK, ps[0])
}

// POST /presence/query {userIds}
func (a *REST) queryPresence(w http.ResponseWriter, r *http.Request) {
	obj, err := readObject(w, r, MaxBodyBytes)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ids, err := idList(obj, "userIds", 1, MaxQueryIDs)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ps, err := a.d.Presences.Presences(r.Context(), viewerOf(r.Context()), ids)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if ps == nil {
		ps = []lastseen.Presence{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{"presences": ps})
}

// GET /conversations/{conversationId}/presence
func (a *REST) conversationPresence(w http.ResponseWriter, r *http.Request) {
	conv, err := pathID(r, "conversationId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ok, err := a.d.Membership.IsMember(r.Context(), conv, viewerOf(r.Context()))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !ok {
		a.fail(w, r, errorf(CodeForbidden, "not a member of this conversation"))
		return
	}
	res, err := a.d.Rosters.Roster(r.Context(), conv)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	typing := res.Typing
	if typing == nil {
		typing = []string{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{
		"conversationId": conv,
		"online":         rosterPayload(r.Context(), a.d.Settings, res.Online),
		"typing":         typing,
	})
}

// GET /me/privacy
func (a *REST) getPrivacy(w http.ResponseWriter, r *http.Request) {
	viewer := viewerOf(r.Context())
	settings, err := a.d.Store.Privacy(r.Context(), []string{viewer})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := settings[viewer]
	if v == "" {
		v = store.DefaultVisibility
	}
	WriteJSON(w, http.StatusOK, map[string]any{"lastSeen": v})
}

// PUT /me/privacy {lastSeen}
func (a *REST) putPrivacy(w http.ResponseWriter, r *http.Request) {
	obj, err := readObject(w, r, MaxBodyBytes)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	raw, ok := obj["lastSeen"]
	if !ok {
		a.fail(w, r, errorf(CodeInvalidArgument, "lastSeen is required"))
		return
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil || !store.Visibility(s).Valid() {
		a.fail(w, r, errorf(CodeInvalidArgument, `lastSeen must be "everyone", "contacts" or "nobody"`))
		return
	}
	v := store.Visibility(s)
	user := viewerOf(r.Context())
	if err := a.d.Store.SetPrivacy(r.Context(), user, v); err != nil {
		a.fail(w, r, err)
		return
	}
	if a.d.Settings != nil {
		a.d.Settings.Set(user, v)
	}
	if a.d.PrivacyChanged != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), serviceTimeout)
		a.d.PrivacyChanged(ctx, user, v)
		cancel()
	}
	WriteJSON(w, http.StatusOK, map[string]any{"lastSeen": v})
}

// serviceList reads what both service routes take: the id in the path
// and the list {userIds} (0 to MaxServiceIDs) in the body. On a bad
// request it answers and returns false.
func (a *REST) serviceList(w http.ResponseWriter, r *http.Request, param string) (string, []string, bool) {
	id, err := pathID(r, param)
	if err == nil {
		var obj map[string]json.RawMessage
		obj, err = readObject(w, r, MaxServiceBodyBytes)
		if err == nil {
			var ids []string
			ids, err = idList(obj, "userIds", 0, MaxServiceIDs)
			if err == nil {
				return id, ids, true
			}
		}
	}
	a.fail(w, r, err)
	return "", nil, false
}

// PUT /service/conversations/{conversationId}/members {userIds}
func (a *REST) setMembers(w http.ResponseWriter, r *http.Request) {
	conv, members, ok := a.serviceList(w, r, "conversationId")
	if !ok {
		return
	}
	// The write and the eviction run to completion even if the caller
	// goes away, so that removed users are not left in the room.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), serviceTimeout)
	defer cancel()
	removed, err := a.d.Store.SetMembers(ctx, conv, members)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if f, ok := a.d.Membership.(interface{ Forget(string) }); ok {
		f.Forget(conv)
	}
	removed = ids.Sorted(removed)
	if a.d.Evict != nil {
		// The member list is saved either way; a failed eviction leaves
		// the removed users' sockets in the room until they leave, and a
		// retry of this request would find nothing to remove.
		if err := a.d.Evict(ctx, conv, removed); err != nil {
			a.log.Error("membership change not applied on every node", "conversation_id", conv, "removed", len(removed), "err", err)
		}
	}
	WriteJSON(w, http.StatusOK, map[string]any{
		"conversationId": conv,
		"members":        len(ids.Sorted(members)),
		"removed":        removed,
	})
}

// PUT /service/users/{userId}/contacts {userIds}
func (a *REST) setContacts(w http.ResponseWriter, r *http.Request) {
	user, contacts, ok := a.serviceList(w, r, "userId")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), serviceTimeout)
	defer cancel()
	if err := a.d.Store.SetContacts(ctx, user, contacts); err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"userId": user, "contacts": len(ids.Sorted(contacts))})
}
