package handlers

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestTimestampMatchesLayout(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0),
		time.Date(2026, 11, 30, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.FixedZone("x", -7*3600)),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(5, 6, 7, 8, 9, 10, 11_000_000, time.UTC),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		times = append(times, time.Unix(r.Int64N(1<<36), r.Int64N(1e9)))
	}
	for _, tm := range times {
		if got, want := Timestamp(tm), tm.UTC().Format(timestampLayout); got != want {
			t.Fatalf("Timestamp(%v) = %s, want %s", tm, got, want)
		}
	}
}
