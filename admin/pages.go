package admin

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/web"
)

// sessionNonce returns the request's valid session, if any: MACed,
// unexpired and not logged out.
func (p *Panel) sessionNonce(r *http.Request) (string, bool) {
	nonce, exp, ok := p.cookieSession(r)
	if !ok || p.revoked.revoked(r.Context(), nonce, exp) {
		return "", false
	}
	return nonce, true
}

// cookieSession returns the request cookie's session, logged out or not.
func (p *Panel) cookieSession(r *http.Request) (string, time.Time, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return "", time.Time{}, false
	}
	return p.sessions.check(c.Value)
}

func (p *Panel) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := p.sessionNonce(r); !ok {
			handlers.WriteError(w, http.StatusUnauthorized, "unauthorized", "log in to the admin panel first")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveFile writes an embedded file.
func serveFile(w http.ResponseWriter, name string) {
	b, err := fs.ReadFile(web.FS, name)
	if err != nil {
		http.NotFound(w, nil)
		return
	}
	switch path.Ext(name) {
	case ".html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".json":
		w.Header().Set("Content-Type", "application/json")
	case ".svg":
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	_, _ = w.Write(b)
}

func (p *Panel) index(w http.ResponseWriter, r *http.Request) {
	if _, ok := p.sessionNonce(r); !ok {
		http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
		return
	}
	serveFile(w, "index.html")
}

func (p *Panel) loginPage(w http.ResponseWriter, _ *http.Request) { serveFile(w, "login.html") }

func (p *Panel) static(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/admin/")
	if strings.Contains(name, "..") || !strings.HasPrefix(name, "static/") {
		http.NotFound(w, r)
		return
	}
	serveFile(w, name)
}

// attempt checks a login token, with the per-IP limit of wrong ones; on
// success it sets the session cookie. It returns the HTTP status.
func (p *Panel) attempt(w http.ResponseWriter, r *http.Request, token string) (int, time.Duration) {
	ip := handlers.ClientIP(r)
	if wait, blocked := p.fails.blocked(r.Context(), ip); blocked {
		p.logins.WithLabelValues("rate_limited").Inc()
		return http.StatusTooManyRequests, wait
	}
	if !sameOrigin(r) {
		p.logins.WithLabelValues("forbidden").Inc()
		p.log.Warn("admin login refused", "ip", ip, "reason", "cross-origin", "origin", r.Header.Get("Origin"))
		return http.StatusForbidden, 0
	}
	if !tokenMatches(token, p.cfg.Token) {
		p.logins.WithLabelValues("wrong_token").Inc()
		p.log.Warn("admin login refused", "ip", ip, "reason", "wrong token")
		if p.fails.add(r.Context(), ip) {
			// the refusals while it is blocked are counted, not logged
			// one by one: a flood would flood the log
			p.log.Warn("admin logins of this IP refused until its window passes", "ip", ip, "wrong_tokens", p.cfg.LoginLimit, "window", p.cfg.LoginWindow.String())
		}
		return http.StatusUnauthorized, 0
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: p.sessions.issue(), Path: "/admin",
		MaxAge: int(p.cfg.SessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
	})
	p.logins.WithLabelValues("ok").Inc()
	p.log.Info("admin login", "ip", ip)
	return http.StatusNoContent, 0
}

func (p *Panel) loginForm(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		http.Redirect(w, r, "/admin/login?e=bad", http.StatusSeeOther)
		return
	}
	switch st, _ := p.attempt(w, r, r.PostForm.Get("token")); st {
	case http.StatusNoContent:
		http.Redirect(w, r, "/admin/", http.StatusSeeOther)
	case http.StatusTooManyRequests:
		http.Redirect(w, r, "/admin/login?e=limited", http.StatusSeeOther)
	case http.StatusForbidden:
		http.Redirect(w, r, "/admin/login?e=origin", http.StatusSeeOther)
	default:
		http.Redirect(w, r, "/admin/login?e=wrong", http.StatusSeeOther)
	}
}

// loginJSON is the scripted login: {"token": "..."} → 204 and the cookie.
func (p *Panel) loginJSON(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		handlers.WriteError(w, http.StatusBadRequest, handlers.CodeInvalidArgument, "body must be {\"token\": string}")
		return
	}
	switch st, wait := p.attempt(w, r, body.Token); st {
	case http.StatusNoContent:
		w.WriteHeader(http.StatusNoContent)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		handlers.WriteError(w, st, "rate_limited", "too many wrong tokens; try again later")
	case http.StatusForbidden:
		handlers.WriteError(w, st, "forbidden", "cross-origin login refused")
	default:
		handlers.WriteError(w, st, "unauthorized", "wrong token")
	}
}

func (p *Panel) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		handlers.WriteError(w, http.StatusForbidden, "forbidden", "cross-origin request refused")
		return
	}
	if nonce, exp, ok := p.cookieSession(r); ok {
		if err := p.revoked.revoke(r.Context(), nonce, exp); err != nil {
			p.log.Warn("admin logout not recorded in Redis: the session ends on this node only until Redis answers", "err", err)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/admin", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
}

// session tells the page its node and the CSRF token of its actions.
func (p *Panel) session(w http.ResponseWriter, r *http.Request) {
	nonce, _ := p.sessionNonce(r)
	handlers.WriteJSON(w, http.StatusOK, map[string]any{
		"node":           p.cfg.NodeID,
		"csrf":           p.sessions.csrf(nonce),
		"refreshMs":      p.cfg.PublishEvery.Milliseconds(),
		"cluster":        p.d.Redis != nil,
		"maxPageSize":    maxPage,
		"defaultPageLen": defaultPage,
	})
}

func (p *Panel) openapi(w http.ResponseWriter, _ *http.Request) { serveFile(w, "openapi.json") }
