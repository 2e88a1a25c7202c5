// Package defaults fills the unset numeric fields of a configuration, for
// the packages' withDefaults methods (for a field where only zero means
// unset, use cmp.Or).
package defaults

// number is what a numeric config field is: a count, a size, a duration.
type number interface {
	~int | ~int32 | ~int64 | ~float64
}

// Positive returns v, or d when v is zero or negative (unset).
func Positive[T number](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// NonNegative returns v; d when v is zero (unset); zero when v is negative
// (the feature off).
func NonNegative[T number](v, d T) T {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return d
	}
	return v
}
