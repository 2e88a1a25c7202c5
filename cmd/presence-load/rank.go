//go:build linux

package main

import (
	"cmp"
	"slices"
)

// entry is one key of a map of counts or shares, with its value.
type entry[V cmp.Ordered] struct {
	k string
	v V
}

// largestFirst returns m's entries, largest value first (equal values by
// key, so that the order is the same from run to run).
func largestFirst[M ~map[string]V, V cmp.Ordered](m M) []entry[V] {
	list := make([]entry[V], 0, len(m))
	for k, v := range m {
		list = append(list, entry[V]{k, v})
	}
	slices.SortFunc(list, func(a, b entry[V]) int {
		if c := cmp.Compare(b.v, a.v); c != 0 {
			return c
		}
		return cmp.Compare(a.k, b.k)
	})
	return list
}
