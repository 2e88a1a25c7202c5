package auth_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/ids"
)

// FuzzVerifyHS256 feeds a token's parts to the HS256 verifier: a header
// and a claims document (JSON, as an attacker writes them), signed with
// the right secret or not. Whatever they hold, Verify does not panic, and
// either refuses with ErrUnauthorized and zero claims, or accepts a token
// whose header names HS256 and whose sub is a valid user id.
func FuzzVerifyHS256(f *testing.F) {
	v := mustHS256(f, testSecret)
	now := time.Now().Unix()
	f.Add(`{"alg":"HS256","typ":"JWT"}`, `{"sub":"alice"}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"alice","exp":`+itoa(now+3600)+`}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"alice","exp":"`+itoa(now+3600)+`"}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"alice","exp":1e400}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"alice","nbf":-1e30,"iat":0.5}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"alice","aud":["a",1]}`, true)
	f.Add(`{"alg":"none"}`, `{"sub":"alice"}`, false)
	f.Add(`{"alg":"HS256","crit":["exp"]}`, `{"sub":"alice"}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"a b"}`, true)
	f.Add(`{"alg":"HS256"}`, `[]`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"alice","exp":null}`, false)
	f.Fuzz(func(t *testing.T, header, claims string, sign bool) {
		var method jwt.SigningMethod
		if sign {
			method = jwt.SigningMethodHS256
		}
		c, ok := verifyFuzzed(t, v, header, claims, method, testSecret)
		if !ok {
			return
		}
		if !sign {
			t.Fatalf("a token with a wrong signature was accepted: %q %q", header, claims)
		}
		var h struct {
			Alg string `json:"alg"`
		}
		if json.Unmarshal([]byte(header), &h) != nil || h.Alg != "HS256" || !ids.Valid(c.UserID) {
			t.Fatalf("accepted %q %q as %+v", header, claims, c)
		}
	})
}

// verifyFuzzed verifies the token of header and claims, signed with key by
// method (nil: a signature that is not one), and checks a refusal: it
// wraps ErrUnauthorized and gives zero claims. It returns the claims of
// an accepted token, and whether it was.
func verifyFuzzed(t *testing.T, v auth.Verifier, header, claims string, method jwt.SigningMethod, key any) (auth.Claims, bool) {
	t.Helper()
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	sig := "c2ln"
	if method != nil {
		s, err := method.Sign(unsigned, key)
		if err != nil {
			t.Fatal(err)
		}
		sig = enc.EncodeToString(s)
	}
	c, err := v.Verify(t.Context(), unsigned+"."+sig)
	if err != nil {
		if !errors.Is(err, auth.ErrUnauthorized) {
			t.Fatalf("refusal %v does not wrap ErrUnauthorized", err)
		}
		if c != (auth.Claims{}) {
			t.Fatalf("claims %+v on a refusal", c)
		}
		return c, false
	}
	return c, true
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// FuzzVerifyJWKS feeds a token's parts to a JWKS verifier whose set has an
// RSA key ("r"), an EC key ("e") and two RSA keys under one id ("s"): a
// header and a claims document as an attacker writes them, with no valid
// signature or signed by one of the set's keys. Verify does not panic, and
// either refuses with ErrUnauthorized and zero claims, or accepts a token
// signed by a key of the set, whose header names that key's algorithm and,
// if it names a key id, that key's, and whose sub is a valid user id.
func FuzzVerifyJWKS(f *testing.F) {
	r, e, s1, s2 := mustRSAKey(f), mustECKey(f), mustRSAKey(f), mustRSAKey(f)
	srv := newJWKSServer(f, rsaJWK("r", &r.PublicKey), ecJWK(f, "e", &e.PublicKey), rsaJWK("s", &s1.PublicKey), rsaJWK("s", &s2.PublicKey))
	v := mustJWKS(f, f.Context(), auth.JWKSConfig{URL: srv.URL})
	signers := []struct {
		method jwt.SigningMethod
		key    any
		kid    string
	}{{nil, nil, ""}, {jwt.SigningMethodRS256, r, "r"}, {jwt.SigningMethodES256, e, "e"}, {jwt.SigningMethodRS256, s2, "s"}}
	f.Add(`{"alg":"RS256","kid":"r"}`, `{"sub":"alice"}`, uint8(1))
	f.Add(`{"alg":"ES256","kid":"e"}`, `{"sub":"alice","exp":1e400}`, uint8(2))
	f.Add(`{"alg":"RS256","kid":"s"}`, `{"sub":"alice"}`, uint8(3))
	f.Add(`{"alg":"RS256","kid":"e"}`, `{"sub":"alice"}`, uint8(1))
	f.Add(`{"alg":"ES256","kid":"r"}`, `{"sub":"alice"}`, uint8(2))
	f.Add(`{"alg":"HS256","kid":"r"}`, `{"sub":"alice"}`, uint8(0))
	f.Add(`{"alg":"RS256"}`, `{"sub":"alice"}`, uint8(1))
	f.Add(`{"alg":"RS256","kid":["r"]}`, `{"sub":"alice"}`, uint8(1))
	f.Add(`{"alg":"RS256","kid":"r","crit":["b64"]}`, `{"sub":"alice"}`, uint8(1))
	f.Add(`{"alg":"none","kid":"r"}`, `{"sub":"alice"}`, uint8(0))
	f.Fuzz(func(t *testing.T, header, claims string, signer uint8) {
		sg := signers[int(signer)%len(signers)]
		c, ok := verifyFuzzed(t, v, header, claims, sg.method, sg.key)
		if !ok {
			return
		}
		var h struct {
			Alg string `json:"alg"`
			Kid any    `json:"kid"`
		}
		if sg.method == nil || json.Unmarshal([]byte(header), &h) != nil || h.Alg != sg.method.Alg() ||
			(h.Kid != nil && h.Kid != sg.kid) || !ids.Valid(c.UserID) {
			t.Fatalf("accepted %q %q (signer %q) as %+v", header, claims, sg.kid, c)
		}
	})
}
