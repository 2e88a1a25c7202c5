package handlers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/presenced/presenced/auth"
)

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
