package jsontext

import (
	"encoding/json"
	"testing"
)

// String and StringPtr encode as encoding/json does, whatever the input.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "alice", "2026-12-02T10:00:00.000Z", `a"b\c`, "<&>", "\x00\n\t", "é", "\xff", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Fatalf("String(%q) = %s, want %s", s, got, want)
		}
		if got := StringPtr([]byte("x"), &s); string(got) != "x"+string(want) {
			t.Fatalf("StringPtr(%q) = %s", s, got)
		}
		if got := StringPtr(nil, nil); string(got) != "null" {
			t.Fatalf("StringPtr(nil) = %s", got)
		}
	})
}
