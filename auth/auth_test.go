package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/presenced/presenced/auth"
)

// testSecret is a valid (>= 16 bytes) HS256 secret used throughout.
var testSecret = []byte("0123456789abcdef-test-secret")

// ---------------------------------------------------------------------------
// helpers

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func mustHS256(tb testing.TB, secret []byte) auth.Verifier {
	tb.Helper()
	v, err := auth.NewHS256(secret)
	if err != nil {
		tb.Fatalf("NewHS256: %v", err)
	}
	return v
}

// sign signs claims with method and key, setting the kid header when non-empty.
func sign(tb testing.TB, method jwt.SigningMethod, key any, claims jwt.Claims, kid string) string {
	tb.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatalf("sign %s: %v", method.Alg(), err)
	}
	return s
}

// hs256 signs claims with HS256 and testSecret, without a kid.
func hs256(tb testing.TB, claims jwt.Claims) string {
	tb.Helper()
	return sign(tb, jwt.SigningMethodHS256, testSecret, claims, "")
}

// rawToken builds header.payload.signature by hand from JSON values.
func rawToken(tb testing.TB, header, payload any, sig []byte) string {
	tb.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		tb.Fatalf("marshal header: %v", err)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		tb.Fatalf("marshal payload: %v", err)
	}
	return b64(h) + "." + b64(p) + "." + b64(sig)
}

// claims returns registered claims for sub, valid for an hour from now.
func claims(sub string, now time.Time) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{
		Subject:   sub,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
	}
}

// expiresAt, notBefore and issuedAt are registered claims for sub with that
// one time claim set to at.
func expiresAt(sub string, at time.Time) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(at)}
}

func notBefore(sub string, at time.Time) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{Subject: sub, NotBefore: jwt.NewNumericDate(at)}
}

func issuedAt(sub string, at time.Time) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{Subject: sub, IssuedAt: jwt.NewNumericDate(at)}
}

// assertAccepted verifies token with v and checks the claims: the subject,
// and the expiry (whole seconds; zero when the token has no exp).
func assertAccepted(tb testing.TB, v auth.Verifier, token, wantSub string, wantExp time.Time) {
	tb.Helper()
	got, err := v.Verify(tb.Context(), token)
	if err != nil {
		tb.Fatalf("Verify: %v (reason %q)", err, auth.Reason(err))
	}
	if got.UserID != wantSub {
		tb.Errorf("UserID = %q, want %q", got.UserID, wantSub)
	}
	want := time.Time{}
	if !wantExp.IsZero() {
		want = wantExp.Truncate(time.Second)
	}
	if !got.ExpiresAt.Equal(want) {
		tb.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, want)
	}
}

// assertRefused checks that err is an auth refusal with exactly wantReason.
func assertRefused(tb testing.TB, err error, wantReason string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("Verify succeeded, want refusal %q", wantReason)
	}
	if !errors.Is(err, auth.ErrUnauthorized) {
		tb.Errorf("errors.Is(%v, ErrUnauthorized) = false, want true", err)
	}
	if got, want := auth.Reason(err), wantReason; got != want {
		tb.Errorf("Reason(%v) = %q, want %q", err, got, want)
	}
	var ae *auth.Error
	if !errors.As(err, &ae) {
		tb.Errorf("errors.As(%v, *auth.Error) = false, want true", err)
	}
}

func mustRSAKey(tb testing.TB) *rsa.PrivateKey {
	tb.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatalf("rsa.GenerateKey: %v", err)
	}
	return k
}

func mustECKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("ecdsa.GenerateKey: %v", err)
	}
	return k
}

// rsaJWK is the public JWK of k.
func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{
		"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(k.N.Bytes()),
		"e": b64(big.NewInt(int64(k.E)).Bytes()),
	}
}

// ecJWK is the public P-256 JWK of k, coordinates padded to 32 bytes.
func ecJWK(tb testing.TB, kid string, k *ecdsa.PublicKey) map[string]string {
	tb.Helper()
	pt, err := k.Bytes() // 0x04 || X (32) || Y (32)
	if err != nil {
		tb.Fatalf("ecdsa PublicKey.Bytes: %v", err)
	}
	if len(pt) != 65 || pt[0] != 4 {
		tb.Fatalf("unexpected P-256 point encoding of %d bytes", len(pt))
	}
	return map[string]string{
		"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
		"x": b64(pt[1:33]),
		"y": b64(pt[33:65]),
	}
}

// jwksServer serves a swappable JWK Set and counts the fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	fetches atomic.Int64
}

func newJWKSServer(tb testing.TB, keys ...map[string]string) *jwksServer {
	tb.Helper()
	s := &jwksServer{}
	s.set(tb, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(tb testing.TB, keys ...map[string]string) {
	tb.Helper()
	body, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		tb.Fatalf("marshal jwks: %v", err)
	}
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

func mustJWKS(tb testing.TB, ctx context.Context, cfg auth.JWKSConfig) auth.Verifier {
	tb.Helper()
	v, err := auth.NewJWKS(ctx, cfg)
	if err != nil {
		tb.Fatalf("NewJWKS: %v", err)
	}
	return v
}

// ---------------------------------------------------------------------------
// HS256

func TestNewHS256(t *testing.T) {
	tests := []struct {
		name    string
		secret  []byte
		wantErr bool
	}{
		{"nil", nil, true},
		{"empty", []byte{}, true},
		{"15 bytes", []byte(strings.Repeat("s", 15)), true},
		{"16 bytes", []byte(strings.Repeat("s", 16)), false},
		{"64 bytes", []byte(strings.Repeat("s", 64)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := auth.NewHS256(tt.secret)
			if got, want := err != nil, tt.wantErr; got != want {
				t.Fatalf("NewHS256(%d bytes) err = %v, want error %v", len(tt.secret), err, want)
			}
			if got, want := v == nil, tt.wantErr; got != want {
				t.Errorf("NewHS256(%d bytes) verifier nil = %v, want %v", len(tt.secret), got, want)
			}
		})
	}
}

func TestNewHS256CopiesSecret(t *testing.T) {
	secret := append([]byte(nil), testSecret...)
	v := mustHS256(t, secret)
	tok, err := auth.SignHS256(testSecret, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatalf("SignHS256: %v", err)
	}
	for i := range secret { // caller scribbles over its buffer afterwards
		secret[i] = 'x'
	}
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Errorf("Verify after caller mutated its secret buffer: %v", err)
	}
}

func TestHS256VerifyAccepts(t *testing.T) {
	now := time.Now()
	v := mustHS256(t, testSecret)

	signed, err := auth.SignHS256(testSecret, "alice", time.Hour, now)
	if err != nil {
		t.Fatalf("SignHS256: %v", err)
	}
	long := strings.Repeat("u", 128)

	tests := []struct {
		name    string
		token   string
		wantSub string
		wantExp time.Time // zero: no exp
	}{
		{
			name:    "SignHS256",
			token:   signed,
			wantSub: "alice",
			wantExp: now.Add(time.Hour),
		},
		{
			name:    "jwt.NewWithClaims registered claims",
			token:   hs256(t, expiresAt("user:1@x.y-z_", now.Add(10*time.Minute))),
			wantSub: "user:1@x.y-z_",
			wantExp: now.Add(10 * time.Minute),
		},
		{
			name: "jwt.NewWithClaims map claims",
			token: hs256(t, jwt.MapClaims{
				"sub":   "bob",
				"exp":   now.Add(time.Minute).Unix(),
				"iat":   now.Unix(),
				"extra": "ignored",
			}),
			wantSub: "bob",
			wantExp: now.Add(time.Minute),
		},
		{
			name:    "no exp is accepted",
			token:   hs256(t, jwt.MapClaims{"sub": "carol"}),
			wantSub: "carol",
		},
		{
			name:    "expired within leeway",
			token:   hs256(t, expiresAt("dave", now.Add(-2*time.Second))),
			wantSub: "dave",
			wantExp: now.Add(-2 * time.Second),
		},
		{
			name:    "nbf within leeway",
			token:   hs256(t, notBefore("erin", now.Add(2*time.Second))),
			wantSub: "erin",
		},
		{
			name:    "iat within leeway",
			token:   hs256(t, issuedAt("frank", now.Add(2*time.Second))),
			wantSub: "frank",
		},
		{
			name:    "surrounding whitespace is trimmed",
			token:   " \t" + signed + "\r\n",
			wantSub: "alice",
			wantExp: now.Add(time.Hour),
		},
		{
			name:    "128-char sub",
			token:   hs256(t, jwt.MapClaims{"sub": long}),
			wantSub: long,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertAccepted(t, v, tt.token, tt.wantSub, tt.wantExp)
		})
	}
}

func TestHS256VerifyRefuses(t *testing.T) {
	now := time.Now()
	v := mustHS256(t, testSecret)

	noneViaLib, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims("alice", now)).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatalf("sign alg none: %v", err)
	}
	noneByHand := rawToken(t,
		map[string]string{"alg": "none", "typ": "JWT"},
		map[string]any{"sub": "alice", "exp": now.Add(time.Hour).Unix()},
		nil)
	if !strings.HasSuffix(noneByHand, ".") {
		t.Fatalf("hand-built none token %q should end with an empty signature", noneByHand)
	}
	// Correctly signed, but over MaxTokenBytes.
	huge := hs256(t, jwt.MapClaims{"sub": "alice", "pad": strings.Repeat("p", auth.MaxTokenBytes)})
	// Correctly signed, with a critical extension (RFC 7515 4.1.11).
	critTok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims("alice", now))
	critTok.Header["crit"] = []string{"exp"}
	crit, err := critTok.SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		token      string
		wantReason string
	}{
		{"empty", "", "missing token"},
		{"critical header", crit, "unsupported critical header"},
		{"whitespace only", " \t\n", "missing token"},
		{"garbage abc", "abc", "malformed token"},
		{"garbage a.b.c", "a.b.c", "malformed token"},
		{"two segments", "eyJhbGciOiJIUzI1NiJ9.e30", "malformed token"},
		{"other secret", sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-16+bytes"), claims("alice", now), ""), "invalid signature"},
		{"tampered payload", func() string {
			parts := strings.Split(hs256(t, claims("alice", now)), ".")
			p, _ := json.Marshal(claims("mallory", now))
			return parts[0] + "." + b64(p) + "." + parts[2]
		}(), "invalid signature"},
		{"alg none by hand", noneByHand, "algorithm not allowed"},
		{"alg none via jwt.SigningMethodNone", noneViaLib, "algorithm not allowed"},
		{"HS384 with right secret", sign(t, jwt.SigningMethodHS384, testSecret, claims("alice", now), ""), "algorithm not allowed"},
		{"HS512 with right secret", sign(t, jwt.SigningMethodHS512, testSecret, claims("alice", now), ""), "algorithm not allowed"},
		{"expired beyond leeway", hs256(t, expiresAt("alice", now.Add(-auth.Leeway-30*time.Second))), "token expired"},
		{"expired via SignHS256", func() string {
			s, err := auth.SignHS256(testSecret, "alice", time.Minute, now.Add(-time.Hour))
			if err != nil {
				t.Fatalf("SignHS256: %v", err)
			}
			return s
		}(), "token expired"},
		{"nbf in the future", hs256(t, notBefore("alice", now.Add(auth.Leeway+30*time.Second))), "token not valid yet"},
		{"iat in the future", hs256(t, issuedAt("alice", now.Add(auth.Leeway+30*time.Second))), "token not valid yet"},
		{"no sub", hs256(t, expiresAt("", now.Add(time.Hour))), "token has no sub"},
		{"empty sub", hs256(t, jwt.MapClaims{"sub": ""}), "token has no sub"},
		{"sub with space", hs256(t, claims("a b", now)), "sub is not a valid user id"},
		{"sub with slash", hs256(t, claims("a/b", now)), "sub is not a valid user id"},
		{"sub 129 chars", hs256(t, claims(strings.Repeat("a", 129), now)), "sub is not a valid user id"},
		{"sub not a string", hs256(t, jwt.MapClaims{"sub": 42}), "malformed token"},
		// NumericDates are JSON numbers (RFC 7519 §2), as Node's jsonwebtoken requires
		{"exp a string", hs256(t, jwt.MapClaims{"sub": "alice", "exp": fmt.Sprint(now.Add(time.Hour).Unix())}), "malformed token"},
		{"nbf a string", hs256(t, jwt.MapClaims{"sub": "alice", "nbf": fmt.Sprint(now.Add(-time.Hour).Unix())}), "malformed token"},
		{"iat a string", hs256(t, jwt.MapClaims{"sub": "alice", "iat": fmt.Sprint(now.Add(-time.Hour).Unix())}), "malformed token"},
		{"too large garbage", strings.Repeat("a", auth.MaxTokenBytes+1), "token too large"},
		{"too large signed", huge, "token too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := v.Verify(t.Context(), tt.token)
			assertRefused(t, err, tt.wantReason)
			if got, want := c, (auth.Claims{}); got != want {
				t.Errorf("claims on refusal = %+v, want zero", got)
			}
		})
	}
}

// The library error stays reachable through the auth error.
func TestHS256VerifyWrapsLibraryError(t *testing.T) {
	v := mustHS256(t, testSecret)
	tok, err := auth.SignHS256(testSecret, "alice", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatalf("SignHS256: %v", err)
	}
	_, err = v.Verify(t.Context(), tok)
	if got, want := errors.Is(err, jwt.ErrTokenExpired), true; got != want {
		t.Errorf("errors.Is(err, jwt.ErrTokenExpired) = %v, want %v (err %v)", got, want, err)
	}
	if got, want := err.Error(), "unauthorized: token expired"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// Key confusion: an RS256 token presented to an HS256 verifier whose secret is
// the RSA public key PEM (which an attacker knows) must be refused, as must an
// HS256 token MACed with that PEM when the verifier was meant for RS256.
func TestHS256RefusesRSAKeyConfusion(t *testing.T) {
	now := time.Now()
	rk := mustRSAKey(t)
	der, err := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatalf("MarshalPKIXPublicKey: %v", err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	v := mustHS256(t, pubPEM)

	// The forged token below shows the setup is right: an HS256 token MACed
	// with the PEM is exactly what this verifier accepts.
	forged := sign(t, jwt.SigningMethodHS256, pubPEM, claims("alice", now), "")
	if _, err := v.Verify(t.Context(), forged); err != nil {
		t.Fatalf("control: HS256 token with PEM secret refused: %v", err)
	}

	tests := []struct {
		name  string
		token string
	}{
		{"RS256 signed with private key", sign(t, jwt.SigningMethodRS256, rk, claims("alice", now), "")},
		{"RS256 header, HMAC-SHA256 with PEM", func() string {
			// Re-label the forged token as RS256, keeping the PEM-keyed MAC.
			parts := strings.Split(forged, ".")
			h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
			signing := b64(h) + "." + parts[1]
			mac, err := jwt.SigningMethodHS256.Sign(signing, pubPEM)
			if err != nil {
				t.Fatalf("HMAC: %v", err)
			}
			return signing + "." + b64(mac)
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Verify(t.Context(), tt.token)
			assertRefused(t, err, "algorithm not allowed")
		})
	}
}

func TestSignHS256Refuses(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name     string
		userID   string
		validFor time.Duration
	}{
		{"empty id", "", time.Hour},
		{"id with space", "a b", time.Hour},
		{"id with slash", "a/b", time.Hour},
		{"id 129 chars", strings.Repeat("a", 129), time.Hour},
		{"non-ascii id", "é", time.Hour},
		{"zero validity", "alice", 0},
		{"negative validity", "alice", -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := auth.SignHS256(testSecret, tt.userID, tt.validFor, now)
			if err == nil {
				t.Fatalf("SignHS256(%q, %s) = %q, want error", tt.userID, tt.validFor, tok)
			}
			if got, want := tok, ""; got != want {
				t.Errorf("token on error = %q, want %q", got, want)
			}
		})
	}
}

func TestReason(t *testing.T) {
	v := mustHS256(t, testSecret)
	_, refusal := v.Verify(t.Context(), "")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"refusal", refusal, "missing token"},
		{"wrapped refusal", fmt.Errorf("handshake: %w", refusal), "missing token"},
		{"other error", errors.New("boom"), "invalid token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := auth.Reason(tt.err), tt.want; got != want {
				t.Errorf("Reason(%v) = %q, want %q", tt.err, got, want)
			}
		})
	}
}

func TestHS256VerifyConcurrent(t *testing.T) {
	v := mustHS256(t, testSecret)
	tok, err := auth.SignHS256(testSecret, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatalf("SignHS256: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				c, err := v.Verify(t.Context(), tok)
				if err != nil || c.UserID != "alice" {
					t.Errorf("Verify = %+v, %v; want alice", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------
// JWKS

func TestNewJWKSRefusesBadURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
	}{
		{"empty", ""},
		{"not a URL", "not a url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := auth.NewJWKS(t.Context(), auth.JWKSConfig{URL: tt.url})
			if err == nil {
				t.Fatalf("NewJWKS(%q) = %v, nil; want error", tt.url, v)
			}
		})
	}
}

func TestJWKS(t *testing.T) {
	now := time.Now()
	rk1 := mustRSAKey(t)
	ek2 := mustECKey(t)
	other := mustRSAKey(t)

	srv := newJWKSServer(t, rsaJWK("k1", &rk1.PublicKey), ecJWK(t, "k2", &ek2.PublicKey))
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL})
	if got, want := srv.fetches.Load(), int64(1); got != want {
		t.Errorf("fetches after NewJWKS = %d, want %d", got, want)
	}

	der, err := x509.MarshalPKIXPublicKey(&rk1.PublicKey)
	if err != nil {
		t.Fatalf("MarshalPKIXPublicKey: %v", err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})

	t.Run("accepts", func(t *testing.T) {
		tests := []struct {
			name  string
			token string
			want  string
		}{
			{"RS256 kid k1", sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), "k1"), "alice"},
			{"ES256 kid k2", sign(t, jwt.SigningMethodES256, ek2, claims("bob", now), "k2"), "bob"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				assertAccepted(t, v, tt.token, tt.want, now.Add(time.Hour))
			})
		}
	})

	t.Run("refuses", func(t *testing.T) {
		tests := []struct {
			name       string
			token      string
			wantReason string
		}{
			{"HS256 kid k1 keyed with public PEM", sign(t, jwt.SigningMethodHS256, pubPEM, claims("alice", now), "k1"), "algorithm not allowed"},
			{"HS256 no kid", hs256(t, claims("alice", now)), "algorithm not allowed"},
			{"RS384 kid k1", sign(t, jwt.SigningMethodRS384, rk1, claims("alice", now), "k1"), "algorithm not allowed"},
			{"alg none kid k1", rawToken(t,
				map[string]string{"alg": "none", "typ": "JWT", "kid": "k1"},
				map[string]any{"sub": "alice"}, nil), "algorithm not allowed"},
			{"RS256 other key kid k1", sign(t, jwt.SigningMethodRS256, other, claims("alice", now), "k1"), "invalid signature"},
			{"expired RS256 kid k1", sign(t, jwt.SigningMethodRS256, rk1, expiresAt("alice", now.Add(-time.Hour)), "k1"), "token expired"},
			{"RS256 kid k1 no sub", sign(t, jwt.SigningMethodRS256, rk1, jwt.RegisteredClaims{}, "k1"), "token has no sub"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := v.Verify(t.Context(), tt.token)
				assertRefused(t, err, tt.wantReason)
			})
		}
	})

	// None of the above had an unknown kid, so none refreshed the set.
	if got, want := srv.fetches.Load(), int64(1); got != want {
		t.Errorf("fetches after known-kid verifications = %d, want %d", got, want)
	}
}

// An unknown kid triggers an on-demand refresh. keyfunc's default limiter
// (one per 5 minutes, burst 1) starts full and the initial fetch does not go
// through it, so the first rotation is picked up at once without any test
// tuning. A second unknown kid within 5 minutes is refused without a fetch
// (and without blocking: the limiter wait would exceed RateLimitWaitMax).
func TestJWKSRotationOnUnknownKID(t *testing.T) {
	now := time.Now()
	rk1, rk3, rk4 := mustRSAKey(t), mustRSAKey(t), mustRSAKey(t)
	srv := newJWKSServer(t, rsaJWK("k1", &rk1.PublicKey))
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL})

	srv.set(t, rsaJWK("k1", &rk1.PublicKey), rsaJWK("k3", &rk3.PublicKey))
	c, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk3, claims("alice", now), "k3"))
	if err != nil {
		t.Fatalf("Verify kid k3 after rotation: %v (reason %q)", err, auth.Reason(err))
	}
	if got, want := c.UserID, "alice"; got != want {
		t.Errorf("UserID = %q, want %q", got, want)
	}
	if got, want := srv.fetches.Load(), int64(2); got != want {
		t.Errorf("fetches after first rotation = %d, want %d", got, want)
	}

	// Second rotation straight away: rate limited.
	srv.set(t, rsaJWK("k3", &rk3.PublicKey), rsaJWK("k4", &rk4.PublicKey))
	start := time.Now()
	_, err = v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk4, claims("alice", now), "k4"))
	assertRefused(t, err, "unverifiable token")
	if got, max := time.Since(start), 2*time.Second; got > max {
		t.Errorf("rate-limited Verify took %v, want < %v", got, max)
	}
	if got, want := srv.fetches.Load(), int64(2); got != want {
		t.Errorf("fetches after rate-limited unknown kid = %d, want %d", got, want)
	}
	// k3 is still served from cache.
	if _, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk3, claims("alice", now), "k3")); err != nil {
		t.Errorf("Verify kid k3 from cache: %v", err)
	}
}

// With the on-demand refresh used up, the periodic refresh (RefreshInterval)
// still picks up a new key, and drops a revoked one.
func TestJWKSRotationOnRefreshInterval(t *testing.T) {
	now := time.Now()
	rk1, rk3 := mustRSAKey(t), mustRSAKey(t)
	srv := newJWKSServer(t, rsaJWK("k1", &rk1.PublicKey))
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL, RefreshInterval: 200 * time.Millisecond})

	// Spend the on-demand refresh on a kid that does not exist.
	_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), "nope"))
	assertRefused(t, err, "unverifiable token")

	srv.set(t, rsaJWK("k3", &rk3.PublicKey)) // k1 revoked, k3 added
	acceptedWithin(t, v, srv, sign(t, jwt.SigningMethodRS256, rk3, claims("alice", now), "k3"), 5*time.Second)
	_, err = v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), "k1"))
	assertRefused(t, err, "unverifiable token")
}

// A token whose key id the set lacks spends the on-demand refresh; a key
// published after it still works within UnknownKIDRefresh (it waited up
// to 5 minutes), and garbage ids fetch the set no more often than that.
func TestJWKSUnknownKIDRefreshSoon(t *testing.T) {
	now := time.Now()
	rk1, rk3 := mustRSAKey(t), mustRSAKey(t)
	srv := newJWKSServer(t, rsaJWK("k1", &rk1.PublicKey))
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL, UnknownKIDRefresh: 300 * time.Millisecond})
	_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), "nope"))
	assertRefused(t, err, "unverifiable token")
	srv.set(t, rsaJWK("k1", &rk1.PublicKey), rsaJWK("k3", &rk3.PublicKey))
	before, start := srv.fetches.Load(), time.Now()
	for i := range 20 {
		_, _ = v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), fmt.Sprintf("garbage-%d", i)))
	}
	// one fetch per UnknownKIDRefresh at most, however many garbage ids
	if n, most := srv.fetches.Load()-before, int64(time.Since(start)/(300*time.Millisecond))+2; n > most {
		t.Errorf("20 garbage key ids fetched the set %d times in %v, want at most %d", n, time.Since(start), most)
	}
	acceptedWithin(t, v, srv, sign(t, jwt.SigningMethodRS256, rk3, claims("alice", now), "k3"), 3*time.Second)
}

// acceptedWithin retries tok until v accepts it, for at most d.
func acceptedWithin(t *testing.T, v auth.Verifier, srv *jwksServer, tok string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, err := v.Verify(t.Context(), tok)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a newly published key still refused %v on: %v (fetches %d)", d, err, srv.fetches.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A key whose use is "enc" verifies nothing (RFC 7517 4.2).
// Two keys under one kid (an issuer rotating keys): a token verifies with
// either, as Node's jose accepts it; a third key's is still refused, and
// a key for encryption under that kid verifies nothing.
func TestJWKSSharedKID(t *testing.T) {
	now := time.Now()
	rk1, rk2, rk3, enc := mustRSAKey(t), mustRSAKey(t), mustRSAKey(t), mustRSAKey(t)
	encJWK := rsaJWK("k1", &enc.PublicKey)
	encJWK["use"] = "enc"
	srv := newJWKSServer(t, rsaJWK("k1", &rk1.PublicKey), encJWK, rsaJWK("k1", &rk2.PublicKey), rsaJWK("k3", &rk3.PublicKey))
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL})
	assertAccepted(t, v, sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), "k1"), "alice", now.Add(time.Hour))
	assertAccepted(t, v, sign(t, jwt.SigningMethodRS256, rk2, claims("bob", now), "k1"), "bob", now.Add(time.Hour))
	assertAccepted(t, v, sign(t, jwt.SigningMethodRS256, rk3, claims("carol", now), "k3"), "carol", now.Add(time.Hour))
	for name, k := range map[string]*rsa.PrivateKey{"another kid's key": rk3, "the encryption key": enc} {
		_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, k, claims("alice", now), "k1"))
		if err == nil {
			t.Errorf("a token of kid k1 signed by %s was accepted", name)
		} else {
			assertRefused(t, err, "invalid signature")
		}
	}
}

func TestJWKSRefusesEncryptionKey(t *testing.T) {
	rk := mustRSAKey(t)
	enc := rsaJWK("k1", &rk.PublicKey)
	enc["use"] = "enc"
	srv := newJWKSServer(t, enc)
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL})
	_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk, claims("alice", time.Now()), "k1"))
	assertRefused(t, err, "unverifiable token")
}

// A key set document over 1 MiB is not read: its keys verify nothing. One
// of exactly 1 MiB is.
func TestJWKSRefusesHugeDocument(t *testing.T) {
	rk := mustRSAKey(t)
	// paddedJWKS is a document holding k1, padded to size bytes.
	paddedJWKS := func(size int) []byte {
		doc := func(pad int) []byte {
			b, err := json.Marshal(map[string]any{"keys": []any{rsaJWK("k1", &rk.PublicKey)}, "pad": strings.Repeat("x", pad)})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		return doc(size - len(doc(0)))
	}
	for _, tc := range []struct {
		size   int
		accept bool
	}{{1 << 20, true}, {1<<20 + 1, false}, {2 << 20, false}} {
		srv := newJWKSServer(t)
		srv.mu.Lock()
		srv.body = paddedJWKS(tc.size)
		srv.mu.Unlock()
		v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL})
		_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rk, claims("alice", time.Now()), "k1"))
		if tc.accept {
			if err != nil {
				t.Errorf("a document of %d bytes: %v, want its key to verify", tc.size, err)
			}
			continue
		}
		assertRefused(t, err, "unverifiable token")
	}
}

func TestJWKSVerifyConcurrent(t *testing.T) {
	now := time.Now()
	rk1 := mustRSAKey(t)
	srv := newJWKSServer(t, rsaJWK("k1", &rk1.PublicKey))
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL, RefreshInterval: 20 * time.Millisecond})
	tok := sign(t, jwt.SigningMethodRS256, rk1, claims("alice", now), "k1")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if _, err := v.Verify(t.Context(), tok); err != nil {
					t.Errorf("Verify: %v", err)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// Verify must honour its ctx: a token with an unknown kid makes keyfunc
// refresh the JWKS synchronously, and a hung JWKS endpoint must not hold the
// caller past its deadline (nor past cfg.HTTPTimeout).
func TestJWKSVerifyHonoursContext(t *testing.T) {
	rk1 := mustRSAKey(t)
	var n atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 { // the first fetch (in NewJWKS) answers; refreshes hang
			select {
			case <-release:
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	v := mustJWKS(t, t.Context(), auth.JWKSConfig{URL: srv.URL, HTTPTimeout: time.Second})

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, rk1, claims("alice", time.Now()), "unknown"))
	assertRefused(t, err, "unverifiable token")
	if got, max := time.Since(start), 2*time.Second; got > max {
		t.Errorf("Verify with a 200ms ctx against a hung JWKS took %v, want < %v", got, max)
	}
}
