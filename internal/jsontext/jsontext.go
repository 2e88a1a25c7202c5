// Package jsontext appends JSON values to byte slices exactly as
// encoding/json encodes them, without reflection, for the payloads sent
// most often (a join's roster, a presence:query answer).
package jsontext

import (
	"encoding/json"
	"fmt"
	"slices"
)

// String appends s quoted as encoding/json quotes it: by hand when s is
// printable ASCII that needs no escape (ids, statuses, times), else by
// encoding/json.
func String(dst []byte, s string) []byte {
	if !Plain(s) {
		b, _ := json.Marshal(s) // a string always encodes
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// Plain reports whether encoding/json encodes s as itself between quotes:
// printable ASCII without a quote, a backslash, or one of the HTML
// characters it escapes.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// StringPtr appends *s as String does, or null.
func StringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return String(dst, *s)
}

// Array appends l as encoding/json encodes a slice: null when l is nil,
// else the elements, each appended by elem. size, the length the caller
// expects, is grown for at once (0: none).
func Array[E any](dst []byte, l []E, size int, elem func(dst []byte, e *E) []byte) []byte {
	if l == nil {
		return append(dst, "null"...)
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, '[')
	for i := range l {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = elem(dst, &l[i])
	}
	return append(dst, ']')
}

// SameAsMarshal checks, for tests, a type that encodes itself: appendJSON
// must append what encoding/json encodes for plain (the same value under
// a type of no methods of its own), and encoding/json must encode typed
// (the value under its own type) the same. The error says how they differ.
func SameAsMarshal(appendJSON func(dst []byte) []byte, plain, typed any) error {
	want, err := json.Marshal(plain)
	if err != nil {
		return err
	}
	if got := appendJSON([]byte("x")); string(got) != "x"+string(want) {
		return fmt.Errorf("AppendJSON = %s\njson.Marshal = %s", got[1:], want)
	}
	if got, _ := json.Marshal(typed); string(got) != string(want) {
		return fmt.Errorf("the type changed encoding/json's output: %s, want %s", got, want)
	}
	return nil
}

// MapLeaves is a copy of v, a tree of the values encoding/json decodes
// into ([]any and map[string]any of anything), with f applied to every
// value that is neither (the leaves); v is not changed.
func MapLeaves(v any, f func(any) any) any {
	switch t := v.(type) {
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = MapLeaves(e, f)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = MapLeaves(e, f)
		}
		return out
	}
	return f(v)
}
