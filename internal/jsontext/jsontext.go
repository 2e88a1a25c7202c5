// Package jsontext appends JSON values to byte slices exactly as
// encoding/json encodes them, without reflection, for the payloads sent
// most often (a join's roster, a presence:query answer).
package jsontext

import "encoding/json"

// String appends s quoted as encoding/json quotes it: by hand when s is
// printable ASCII that needs no escape (ids, statuses, times), else by
// encoding/json.
func String(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// StringPtr appends *s as String does, or null.
func StringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return String(dst, *s)
}
