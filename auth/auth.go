// Package auth verifies the JSON Web Tokens that clients present at the
// Socket.IO handshake and on the REST API, and mints tokens for development.
//
// Two key sources exist: a shared HS256 secret, or RS256/ES256 public keys
// fetched (and cached, and refreshed) from a JWKS URL. Verification is done by
// github.com/golang-jwt/jwt/v5; nothing here touches cryptography itself.
package auth

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/presenced/presenced/ids"
)

// ErrUnauthorized is wrapped by every verification failure. Its wrapping
// error's Reason gives the short, client-safe explanation.
var ErrUnauthorized = errors.New("unauthorized")

// Error is a refused token with a short reason safe to show to the client.
type Error struct {
	Reason string
	err    error
}

func (e *Error) Error() string { return "unauthorized: " + e.Reason }

// Unwrap lets errors.Is(err, ErrUnauthorized) and the library error through.
func (e *Error) Unwrap() []error { return []error{ErrUnauthorized, e.err} }

func refuse(reason string, err error) *Error { return &Error{Reason: reason, err: err} }

// Reason returns the short client-facing reason of a verification error, or
// "invalid token" for any other error.
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return "invalid token"
}

// Claims are what the server keeps of a verified token.
type Claims struct {
	UserID    string
	ExpiresAt time.Time // zero when the token carries no exp
}

// Verifier checks a bearer token and returns its claims.
type Verifier interface {
	Verify(ctx context.Context, token string) (Claims, error)
}

// MaxTokenBytes bounds the token size accepted before parsing.
const MaxTokenBytes = 8 << 10

// jwtVerifier is the one implementation: a jwt parser, the algorithms
// allowed and a key source bound to the caller's context.
type jwtVerifier struct {
	parser  *jwt.Parser
	needAud bool // an audience is configured
	algs    []string
	keys    func(context.Context) jwt.Keyfunc
}

// errAlgorithm marks a token whose alg header is not allowed ("none" included).
var errAlgorithm = errors.New("algorithm not allowed")

// errCritical marks a token with a crit header: it names extensions a
// verifier must understand to accept it, and this one understands none.
var errCritical = errors.New("unsupported critical header")

// Option adds a requirement on every token a verifier accepts.
type Option func(*options)

type options struct {
	audience []string
	issuer   string
}

// WithAudience requires tokens whose aud names one of audiences (the
// token's aud may list others too). Empty entries are ignored; with none
// left, aud is not checked.
func WithAudience(audiences ...string) Option {
	return func(o *options) {
		for _, a := range audiences {
			if a != "" {
				o.audience = append(o.audience, a)
			}
		}
	}
}

// WithIssuer requires tokens whose iss is issuer; "" checks nothing.
func WithIssuer(issuer string) Option { return func(o *options) { o.issuer = issuer } }

func newVerifier(algs []string, keys func(context.Context) jwt.Keyfunc, opts []Option) *jwtVerifier {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// The algorithm allow-list is checked in keyfunc rather than with
	// jwt.WithValidMethods so that the refusal can be told apart.
	popts := []jwt.ParserOption{jwt.WithLeeway(Leeway), jwt.WithIssuedAt()}
	if len(o.audience) > 0 {
		popts = append(popts, jwt.WithAudience(o.audience...))
	}
	if o.issuer != "" {
		popts = append(popts, jwt.WithIssuer(o.issuer))
	}
	return &jwtVerifier{
		parser:  jwt.NewParser(popts...),
		needAud: len(o.audience) > 0,
		algs:    algs,
		keys:    keys,
	}
}

func (v *jwtVerifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	keys := v.keys(ctx)
	return func(t *jwt.Token) (any, error) {
		alg, _ := t.Header["alg"].(string)
		if t.Method == nil || !slices.Contains(v.algs, alg) || t.Method.Alg() != alg {
			return nil, errAlgorithm
		}
		if _, ok := t.Header["crit"]; ok {
			// RFC 7515 4.1.11: extensions the token says must be
			// understood; we understand none
			return nil, errCritical
		}
		return keys(t)
	}
}

var _ Verifier = (*jwtVerifier)(nil)

// Leeway tolerated on exp/nbf/iat for clock skew between issuer and server.
const Leeway = 5 * time.Second

// NewHS256 verifies tokens signed with HS256 and the given secret.
func NewHS256(secret []byte, opts ...Option) (Verifier, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("auth: HS256 secret must be at least 16 bytes, got %d", len(secret))
	}
	key := append([]byte(nil), secret...)
	keyfunc := func(*jwt.Token) (any, error) { return key, nil }
	return newVerifier([]string{"HS256"}, func(context.Context) jwt.Keyfunc { return keyfunc }, opts), nil
}

// JWKSConfig configures NewJWKS. Zero values mean the defaults.
type JWKSConfig struct {
	URL             string
	RefreshInterval time.Duration // default 1h; unknown key ids also trigger a (rate-limited) refresh
	// UnknownKIDRefresh is the least time between two refreshes triggered
	// by a token whose key id the set lacks (default 10s): a key the
	// issuer has just published works within that, however many tokens
	// with made-up ids came before it.
	UnknownKIDRefresh time.Duration
	HTTPTimeout       time.Duration // default 10s
	Client            *http.Client  // default http.DefaultClient
	Log               *slog.Logger
}

// maxJWKSBytes bounds the key set document: a JWKS holds a few keys of a
// few KB; the whole document was kept, however large.
const maxJWKSBytes = 1 << 20

// NewJWKS verifies RS256/ES256 tokens with keys from a JWKS endpoint. The key
// set is fetched in the background, cached, and refreshed until ctx ends.
// A key whose "use" is not "sig" (an encryption key) verifies nothing.
func NewJWKS(ctx context.Context, cfg JWKSConfig, opts ...Option) (Verifier, error) {
	if cfg.URL == "" {
		return nil, errors.New("auth: JWKS URL is empty")
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = time.Hour
	}
	if cfg.UnknownKIDRefresh <= 0 {
		cfg.UnknownKIDRefresh = 10 * time.Second
	}
	if cfg.HTTPTimeout <= 0 {
		cfg.HTTPTimeout = 10 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client := http.DefaultClient
	if cfg.Client != nil {
		client = cfg.Client
	}
	limited := *client
	limited.Transport = limitBody{next: client.Transport, max: maxJWKSBytes}
	remote, err := jwkset.NewStorageFromHTTP(cfg.URL, jwkset.HTTPClientStorageOptions{
		Client:                    &limited,
		Ctx:                       ctx,
		HTTPTimeout:               cfg.HTTPTimeout,
		NoErrorReturnFirstHTTPReq: true, // start while the endpoint is down
		RefreshInterval:           cfg.RefreshInterval,
		RefreshErrorHandler: func(_ context.Context, err error) {
			log.Warn("jwks refresh failed", "url", cfg.URL, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: %w", err)
	}
	storage, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{cfg.URL: remote},
		// an unknown key id waits at most this long for a refresh's turn,
		// then is refused (the client's retry finds the key refreshed)
		RateLimitWaitMax:  time.Second,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDRefresh), 1),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: %w", err)
	}
	kf, err := keyfunc.New(keyfunc.Options{
		Ctx:          ctx,
		Storage:      storage,
		UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}, // "" : no use given
	})
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: %w", err)
	}
	keys := func(ctx context.Context) jwt.Keyfunc {
		byKID := kf.KeyfuncCtx(ctx)
		return func(t *jwt.Token) (any, error) {
			if set := sharedKID(ctx, storage, t); len(set.Keys) > 1 {
				return set, nil
			}
			return byKID(t)
		}
	}
	return newVerifier([]string{"RS256", "ES256"}, keys, opts), nil
}

// sharedKID returns the keys of the set with the token's kid, when the set
// has more than one of them (an issuer rotating keys may publish two under
// one id, as Node's jose accepts: a token verifies with either). keyfunc
// looks a kid up once and would try the first only. Keys for another use
// or algorithm are left out.
func sharedKID(ctx context.Context, storage jwkset.Storage, t *jwt.Token) jwt.VerificationKeySet {
	var set jwt.VerificationKeySet
	kid, ok := t.Header[jwkset.HeaderKID].(string)
	alg, _ := t.Header["alg"].(string)
	if !ok {
		return set
	}
	all, err := storage.KeyReadAll(ctx)
	if err != nil {
		return set
	}
	for _, k := range all {
		m := k.Marshal()
		if m.KID != kid || (m.ALG != "" && m.ALG.String() != alg) || (m.USE != "" && m.USE != jwkset.UseSig) {
			continue
		}
		key := k.Key()
		if pk, ok := key.(interface{ Public() crypto.PublicKey }); ok {
			key = pk.Public()
		}
		set.Keys = append(set.Keys, key)
	}
	return set
}

// limitBody is a RoundTripper whose response bodies fail past max bytes.
type limitBody struct {
	next http.RoundTripper // nil: http.DefaultTransport
	max  int64
}

func (l limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	next := l.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, left: l.max + 1}
	return resp, nil
}

// errJWKSTooLarge: the key set document passed maxJWKSBytes.
var errJWKSTooLarge = fmt.Errorf("auth: jwks document over %d bytes", maxJWKSBytes)

// cappedBody fails once a body has given more than its limit: left is
// the limit and one byte more at the start (a body of exactly the limit
// ends at EOF as it should).
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errJWKSTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	if c.left <= 0 {
		// the byte past the limit is not handed on: what was is no whole
		// document, even to a decoder that stops at its end
		return n - 1, errJWKSTooLarge
	}
	return n, err
}

// Verify parses and validates the token and returns its claims. Every error
// wraps ErrUnauthorized and carries a short Reason.
func (v *jwtVerifier) Verify(ctx context.Context, token string) (Claims, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return Claims{}, refuse("missing token", nil)
	}
	if len(token) > MaxTokenBytes {
		return Claims{}, refuse("token too large", nil)
	}
	var nc numericClaims
	tok, err := v.parser.ParseWithClaims(token, &nc, v.keyfunc(ctx))
	rc := nc.RegisteredClaims
	if err != nil {
		reason := classify(err)
		if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
			// the only claims required are a configured aud and iss
			reason = "token has no iss"
			if v.needAud && !slices.ContainsFunc(rc.Audience, func(a string) bool { return a != "" }) {
				reason = "token has no aud"
			}
		}
		// The library refuses algorithms it does not know (such as "None")
		// before our check runs; name those the same way.
		if tok != nil && errors.Is(err, jwt.ErrTokenUnverifiable) {
			if alg, _ := tok.Header["alg"].(string); !slices.Contains(v.algs, alg) {
				reason = "algorithm not allowed"
			}
		}
		return Claims{}, refuse(reason, err)
	}
	if rc.Subject == "" {
		return Claims{}, refuse("token has no sub", nil)
	}
	if !ids.Valid(rc.Subject) {
		return Claims{}, refuse("sub is not a valid user id", nil)
	}
	c := Claims{UserID: rc.Subject}
	if rc.ExpiresAt != nil {
		c.ExpiresAt = rc.ExpiresAt.Time
	}
	return c, nil
}

// numericClaims are the registered claims, whose times (exp, nbf, iat)
// must be JSON numbers (RFC 7519 §2, NumericDate). The library also reads
// a string that holds a number; Node's jsonwebtoken refuses one, and so do
// we: the token is malformed.
type numericClaims struct {
	jwt.RegisteredClaims
}

func (c *numericClaims) UnmarshalJSON(b []byte) error {
	var times struct {
		Exp json.RawMessage `json:"exp"`
		Nbf json.RawMessage `json:"nbf"`
		Iat json.RawMessage `json:"iat"`
	}
	if err := json.Unmarshal(b, &times); err != nil {
		return err
	}
	for name, v := range map[string]json.RawMessage{"exp": times.Exp, "nbf": times.Nbf, "iat": times.Iat} {
		if len(v) > 0 && v[0] == '"' {
			return fmt.Errorf("%s is a string, not a number", name)
		}
	}
	return json.Unmarshal(b, &c.RegisteredClaims)
}

// classify maps a jwt library error to a short reason.
func classify(err error) string {
	switch {
	case errors.Is(err, errAlgorithm):
		return "algorithm not allowed"
	case errors.Is(err, errCritical):
		return "unsupported critical header"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "invalid signature"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable token"
	default:
		return "invalid token"
	}
}

// SignHS256 mints an HS256 token for userID valid for validFor (dev tooling
// and tests; production tokens come from the host application). The
// options a verifier requires, given here, put the (first) audience in aud
// and the issuer in iss, so that such a verifier accepts the token.
func SignHS256(secret []byte, userID string, validFor time.Duration, now time.Time, opts ...Option) (string, error) {
	if !ids.Valid(userID) {
		return "", fmt.Errorf("auth: %q is not a valid user id (%s)", userID, ids.Rule)
	}
	if validFor <= 0 {
		return "", fmt.Errorf("auth: validity must be positive, got %s", validFor)
	}
	claims := jwt.RegisteredClaims{
		Subject:   userID,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(validFor)),
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.audience) > 0 {
		claims.Audience = jwt.ClaimStrings{o.audience[0]}
	}
	claims.Issuer = o.issuer
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}
