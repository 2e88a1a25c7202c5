package defaults_test

import (
	"testing"
	"time"

	"github.com/presenced/presenced/internal/defaults"
)

func TestPositive(t *testing.T) {
	for _, tc := range []struct{ v, want time.Duration }{
		{-time.Second, time.Minute},
		{0, time.Minute},
		{time.Second, time.Second},
	} {
		if got := defaults.Positive(tc.v, time.Minute); got != tc.want {
			t.Errorf("Positive(%v, 1m) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestNonNegative(t *testing.T) {
	for _, tc := range []struct{ v, want int }{
		{-1, 0},
		{0, 5},
		{3, 3},
	} {
		if got := defaults.NonNegative(tc.v, 5); got != tc.want {
			t.Errorf("NonNegative(%d, 5) = %d, want %d", tc.v, got, tc.want)
		}
	}
}
