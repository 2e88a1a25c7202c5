package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/presenced/presenced/auth"
)

// TestAudienceAndIssuer: with PRESENCE_JWT_AUDIENCE / PRESENCE_JWT_ISSUER
// set, a token needs a matching aud and iss (CONTRACT §1); without them,
// neither is looked at.
func TestAudienceAndIssuer(t *testing.T) {
	now := time.Now()
	with := func(aud []string, iss string) jwt.RegisteredClaims {
		c := claims("u1", now)
		c.Audience, c.Issuer = aud, iss
		return c
	}
	tests := []struct {
		name   string
		opts   []auth.Option
		claims jwt.RegisteredClaims
		reason string // "" = accepted
	}{
		{"nothing required, none given", nil, with(nil, ""), ""},
		{"nothing required, any given", nil, with([]string{"other"}, "someone"), ""},
		{"empty options check nothing", []auth.Option{auth.WithAudience(""), auth.WithIssuer("")}, with([]string{"other"}, "someone"), ""},

		{"good aud", []auth.Option{auth.WithAudience("presence")}, with([]string{"presence"}, ""), ""},
		{"good aud among several", []auth.Option{auth.WithAudience("presence")}, with([]string{"billing", "presence"}, ""), ""},
		{"one of the configured audiences", []auth.Option{auth.WithAudience("a", "presence")}, with([]string{"presence"}, ""), ""},
		{"wrong aud", []auth.Option{auth.WithAudience("presence")}, with([]string{"billing"}, ""), "wrong audience"},
		{"missing aud", []auth.Option{auth.WithAudience("presence")}, with(nil, ""), "token has no aud"},
		{"empty aud", []auth.Option{auth.WithAudience("presence")}, with([]string{""}, ""), "token has no aud"},

		{"good iss", []auth.Option{auth.WithIssuer("https://idp.example")}, with(nil, "https://idp.example"), ""},
		{"wrong iss", []auth.Option{auth.WithIssuer("https://idp.example")}, with(nil, "https://evil.example"), "wrong issuer"},
		{"missing iss", []auth.Option{auth.WithIssuer("https://idp.example")}, with(nil, ""), "token has no iss"},

		{"both good", []auth.Option{auth.WithAudience("presence"), auth.WithIssuer("idp")}, with([]string{"presence"}, "idp"), ""},
		{"both required, iss missing", []auth.Option{auth.WithAudience("presence"), auth.WithIssuer("idp")}, with([]string{"presence"}, ""), "token has no iss"},
		{"both required, aud missing", []auth.Option{auth.WithAudience("presence"), auth.WithIssuer("idp")}, with(nil, "idp"), "token has no aud"},
		{"both required, both wrong", []auth.Option{auth.WithAudience("presence"), auth.WithIssuer("idp")}, with([]string{"x"}, "y"), "wrong audience"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := auth.NewHS256(testSecret, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			tok := hs256(t, tt.claims)
			c, err := v.Verify(context.Background(), tok)
			if tt.reason == "" {
				if err != nil || c.UserID != "u1" {
					t.Fatalf("Verify: %v, %+v; want accepted", err, c)
				}
				return
			}
			assertRefused(t, err, tt.reason)
		})
	}
}

// TestJWKSAudienceAndIssuer: the JWKS verifier takes the same options.
func TestJWKSAudienceAndIssuer(t *testing.T) {
	key := mustRSAKey(t)
	srv := newJWKSServer(t, rsaJWK("k1", &key.PublicKey))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := auth.NewJWKS(ctx, auth.JWKSConfig{URL: srv.URL}, auth.WithAudience("presence"), auth.WithIssuer("idp"))
	if err != nil {
		t.Fatal(err)
	}
	c := claims("u1", time.Now())
	c.Audience, c.Issuer = jwt.ClaimStrings{"presence"}, "idp"
	if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, key, c, "k1")); err != nil {
		t.Fatalf("good aud and iss: %v", err)
	}
	c.Issuer = "other"
	_, err = v.Verify(ctx, sign(t, jwt.SigningMethodRS256, key, c, "k1"))
	assertRefused(t, err, "wrong issuer")
	c.Issuer, c.Audience = "idp", nil
	_, err = v.Verify(ctx, sign(t, jwt.SigningMethodRS256, key, c, "k1"))
	assertRefused(t, err, "token has no aud")
}
