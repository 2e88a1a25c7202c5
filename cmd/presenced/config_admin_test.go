package main

import (
	"bytes"
	"testing"
)

func TestAdminToken(t *testing.T) {
	c := mustServeConfig(t, nil)
	if len(c.AdminToken) < 16 {
		t.Fatalf("dev mode: generated admin token %q, want ≥ 16 bytes", c.AdminToken)
	}
	prod := []string{"PRESENCE_JWT_SECRET", "0123456789abcdef0123"}
	c = mustServeConfig(t, nil, prod...)
	if c.AdminToken != "" {
		t.Fatalf("outside dev mode without PRESENCE_ADMIN_TOKEN: %q, want the panel off", c.AdminToken)
	}
	c, _, err := parseConfig("serve", []string{"--admin-token", "a-long-admin-token-1"}, env(prod...), &bytes.Buffer{}, nil)
	if err != nil || c.AdminToken != "a-long-admin-token-1" {
		t.Fatalf("flag: %q %v", c.AdminToken, err)
	}
	if _, _, err := parseConfig("serve", nil, env(append(prod, "PRESENCE_ADMIN_TOKEN", "short")...), &bytes.Buffer{}, nil); err == nil {
		t.Fatal("a 5-byte admin token was accepted")
	}
}
