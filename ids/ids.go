// Package ids holds the rule of user and conversation ids (CONTRACT §1)
// and what is done to lists of them: deduplication, and the clipping of a
// refused value for an error message.
package ids

import (
	"slices"
	"sync"
)

// Rule is the id rule, as error messages state it.
const Rule = "1-128 characters of A-Z a-z 0-9 _ . : @ -"

// MaxLen is the longest id.
const MaxLen = 128

// alphabet marks the bytes an id may hold: A-Z a-z 0-9 _ . : @ -.
var alphabet = func() (a [256]bool) {
	for _, r := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:@-" {
		a[r] = true
	}
	return a
}()

// Valid reports whether s is a valid user or conversation id (Rule). It is
// on every path that takes ids (a query of 1,000 ids checks each a few
// times), so it is a table lookup per byte, not a regular expression.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !alphabet[s[i]] {
			return false
		}
	}
	return true
}

// Unique returns ids without duplicates, in first-seen order (a new slice,
// never nil).
func Unique(ids []string) []string {
	out := make([]string, 0, len(ids))
	if len(ids) <= uniqueScan {
		for _, id := range ids {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
		return out
	}
	seen := seenSets.Get().(map[string]struct{})
	for _, id := range ids {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	clear(seen) // keeps its room, and no id
	seenSets.Put(seen)
	return out
}

// uniqueScan is the most ids Unique compares with each other rather than
// set in a map.
const uniqueScan = 16

// seenSets are Unique's sets, used again: a set of 1,000 ids was a tenth
// of what a presence:query of 1,000 ids allocated.
var seenSets = sync.Pool{New: func() any { return make(map[string]struct{}) }}

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
