package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/auth"
)

func TestJWTAudienceIssuerSettings(t *testing.T) {
	c := mustServeConfig(t, nil)
	if c.JWTAudience != nil || c.JWTIssuer != "" {
		t.Errorf("defaults: %q %q, want none", c.JWTAudience, c.JWTIssuer)
	}
	c = mustServeConfig(t, []string{"--jwt-audience", "presence, chat,"}, "PRESENCE_JWT_ISSUER", "https://idp.example")
	if !slices.Equal(c.JWTAudience, []string{"presence", "chat"}) || c.JWTIssuer != "https://idp.example" {
		t.Errorf("values: %q %q", c.JWTAudience, c.JWTIssuer)
	}

	// The server's verifier requires them, and `presenced token` mints
	// tokens that carry them.
	const secret = "0123456789abcdef"
	args := []string{"--jwt-secret", secret, "--jwt-audience", "presence", "--jwt-issuer", "idp"}
	var out bytes.Buffer
	if err := run(context.Background(), append([]string{"token", "bob"}, args...), env(), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out.String())
	cfg := mustServeConfig(t, args)
	v, _, err := newVerifier(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := v.Verify(context.Background(), tok); err != nil || cl.UserID != "bob" {
		t.Errorf("minted token: %v %+v", err, cl)
	}
	plain, err := auth.SignHS256([]byte(secret), "bob", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), plain); auth.Reason(err) != "token has no aud" {
		t.Errorf("a token without aud: %v, want refused (token has no aud)", err)
	}
}
