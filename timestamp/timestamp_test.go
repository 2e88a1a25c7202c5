package timestamp_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/presenced/presenced/timestamp"
)

func TestFormatMatchesLayout(t *testing.T) {
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
		if got, want := timestamp.Format(tm), tm.UTC().Format(timestamp.Layout); got != want {
			t.Fatalf("Format(%v) = %s, want %s", tm, got, want)
		}
	}
}

func TestFormat(t *testing.T) {
	if got, want := timestamp.Format(time.Date(2026, 11, 30, 11, 47, 0, 0, time.UTC)), "2026-11-30T11:47:00.000Z"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestMillis(t *testing.T) {
	at := time.Date(2026, 11, 30, 11, 47, 1, 234_567_890, time.FixedZone("x", 3600))
	ms := timestamp.Millis(at)
	if got, want := timestamp.FromMillis(ms), at.Truncate(time.Millisecond).UTC(); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("FromMillis(Millis(%v)) = %v, want %v", at, got, want)
	}
}
