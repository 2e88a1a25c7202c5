package jsontext

import (
	"encoding/json"
	"reflect"
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

func TestMapLeaves(t *testing.T) {
	in := map[string]any{"a": []any{1.0, "x", map[string]any{"b": 2.0}}, "c": nil}
	got := MapLeaves(in, func(v any) any {
		if f, ok := v.(float64); ok {
			return f * 10
		}
		return v
	})
	want := map[string]any{"a": []any{10.0, "x", map[string]any{"b": 20.0}}, "c": nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	if in["a"].([]any)[0] != 1.0 {
		t.Fatal("the input changed")
	}
}
