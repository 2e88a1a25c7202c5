// Package ids holds the rule of user and conversation ids (CONTRACT §1)
// and what is done to lists of them: deduplication, and the clipping of a
// refused value for an error message.
package ids

import (
	"regexp"
	"slices"
)

// Rule is the id rule, as error messages state it.
const Rule = "1-128 characters of A-Z a-z 0-9 _ . : @ -"

// pattern is the contract's id alphabet: 1–128 of [A-Za-z0-9_.:@-].
var pattern = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)

// Valid reports whether s is a valid user or conversation id.
func Valid(s string) bool { return pattern.MatchString(s) }

// Unique returns ids without duplicates, in first-seen order (a new slice,
// never nil).
func Unique(ids []string) []string {
	seen := make(map[string]struct{}, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}

// Sorted returns ids sorted, without duplicates (a new slice, never nil).
func Sorted(ids []string) []string {
	out := append(make([]string, 0, len(ids)), ids...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Clip shortens a refused value (an id, or any other) for an error
// message: at most 40 bytes and an ellipsis.
func Clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
