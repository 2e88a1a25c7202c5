package admin

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sessions are stateless: the cookie is "expiry.nonce.mac", MACed with a
// key derived from the admin token. Every node of a cluster shares the
// token, so a session opened on one node is valid on all (a load balancer
// may send each request elsewhere), and changing the token ends every
// session. A logout is recorded until the session's expiry (revocations).

const cookieName = "presenced_admin"

type sessions struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

func newSessions(token string, ttl time.Duration) *sessions {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("presenced admin session v1"))
	return &sessions{key: m.Sum(nil), ttl: ttl, now: time.Now}
}

func (s *sessions) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(strings.Join(parts, "|")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a new session value.
func (s *sessions) issue() string {
	var n [16]byte
	_, _ = rand.Read(n[:])
	exp := strconv.FormatInt(s.now().Add(s.ttl).Unix(), 10)
	nonce := hex.EncodeToString(n[:])
	return exp + "." + nonce + "." + s.mac("session", exp, nonce)
}

// check returns the session's nonce and expiry when the value is a valid,
// unexpired session (logged out or not: revocations).
func (s *sessions) check(v string) (string, time.Time, bool) {
	f := strings.Split(v, ".")
	if len(f) != 3 {
		return "", time.Time{}, false
	}
	if !hmac.Equal([]byte(f[2]), []byte(s.mac("session", f[0], f[1]))) {
		return "", time.Time{}, false
	}
	exp, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || s.now().Unix() >= exp {
		return "", time.Time{}, false
	}
	return f[1], time.Unix(exp, 0), true
}

// csrf is the token a page must send back (X-CSRF-Token) with each action;
// it is bound to the session.
func (s *sessions) csrf(nonce string) string { return s.mac("csrf", nonce) }

// tokenMatches compares in constant time (over hashes, so the length does
// not leak either).
func tokenMatches(got, want string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && want != ""
}

// failures rate-limits wrong tokens per client IP: Limit failures per
// Window, then every attempt (right or wrong) is refused until the window
// of the oldest failure passes. With Redis (a cluster) the failures are
// counted there, in a sorted set per IP (<prefix>:admin:fails:<ip>), so
// that the limit holds across nodes, not per node; if Redis fails, the
// node counts on its own meanwhile.
type failures struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	byIP   map[string][]time.Time
	now    func() time.Time

	rdb    redis.UniversalClient // nil: this node's count only
	prefix string                // the Redis keys' prefix
}

func newFailures(limit int, window time.Duration) *failures {
	return &failures{limit: limit, window: window, byIP: map[string][]time.Time{}, now: time.Now}
}

// failuresTimeout bounds each Redis round trip of the limit.
const failuresTimeout = time.Second

func (f *failures) key(ip string) string { return f.prefix + ":admin:fails:" + ip }

// blocked reports whether ip may not try now, and for how long.
func (f *failures) blocked(ctx context.Context, ip string) (time.Duration, bool) {
	now := f.now()
	if f.rdb != nil {
		ctx, cancel := context.WithTimeout(ctx, failuresTimeout)
		defer cancel()
		pipe := f.rdb.TxPipeline()
		pipe.ZRemRangeByScore(ctx, f.key(ip), "-inf", strconv.FormatInt(now.Add(-f.window).UnixMilli(), 10))
		first := pipe.ZRangeWithScores(ctx, f.key(ip), 0, 0)
		n := pipe.ZCard(ctx, f.key(ip))
		if _, err := pipe.Exec(ctx); err == nil {
			if int(n.Val()) < f.limit || len(first.Val()) == 0 {
				return 0, false
			}
			return time.UnixMilli(int64(first.Val()[0].Score)).Add(f.window).Sub(now), true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ts := f.prune(ip, now)
	if len(ts) < f.limit {
		return 0, false
	}
	return ts[0].Add(f.window).Sub(now), true
}

// add notes a wrong token of ip; it reports whether ip is blocked from now.
func (f *failures) add(ctx context.Context, ip string) bool {
	now := f.now()
	if f.rdb != nil {
		ctx, cancel := context.WithTimeout(ctx, failuresTimeout)
		defer cancel()
		var id [8]byte
		_, _ = rand.Read(id[:])
		pipe := f.rdb.TxPipeline()
		pipe.ZRemRangeByScore(ctx, f.key(ip), "-inf", strconv.FormatInt(now.Add(-f.window).UnixMilli(), 10))
		pipe.ZAdd(ctx, f.key(ip), redis.Z{Score: float64(now.UnixMilli()), Member: hex.EncodeToString(id[:])})
		pipe.PExpire(ctx, f.key(ip), f.window)
		n := pipe.ZCard(ctx, f.key(ip))
		if _, err := pipe.Exec(ctx); err == nil {
			return int(n.Val()) == f.limit
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byIP[ip] = append(f.prune(ip, now), now)
	blocked := len(f.byIP[ip]) == f.limit
	if len(f.byIP) > 10000 {
		// a scan from many addresses: forget the ones whose window passed
		for k := range f.byIP {
			f.prune(k, now)
		}
	}
	return blocked
}

func (f *failures) prune(ip string, now time.Time) []time.Time {
	ts := f.byIP[ip]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= f.window {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(f.byIP, ip)
		return nil
	}
	f.byIP[ip] = ts
	return ts
}

// sameOrigin refuses cross-site requests that change something: a browser
// sends Origin on every POST; when present it must be this host. (The
// session cookie is SameSite=Strict too, and actions need the CSRF token.)
func sameOrigin(r *http.Request) bool {
	o, site := r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")
	if o == "" || o == "null" {
		// no Origin: not a browser, or an old one; "null": a browser that
		// hides it (privacy settings), which then tells Sec-Fetch-Site
		return site == "same-origin" || (site == "" && o == "")
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// csp is every admin response's Content-Security-Policy: only this
// origin's files, no inline script or style, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
