package timestamp_test

import (
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

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

// The cache answers Format's text; a string is shared within its
// millisecond only; concurrent use is safe (go test -race).
func TestCacheFormat(t *testing.T) {
	var c timestamp.Cache
	base := time.Date(2026, 12, 5, 17, 4, 5, 123_000_000, time.UTC)
	times := []time.Time{base, base.Add(400 * time.Microsecond), base.Add(time.Millisecond), base, time.Unix(0, 0), time.Unix(-1, 999_999_999)}
	for _, tm := range times {
		if got, want := c.Format(tm), timestamp.Format(tm); got != want {
			t.Fatalf("Cache.Format(%v) = %s, want %s", tm, got, want)
		}
	}
	a, b := c.Format(base), c.Format(base.Add(999*time.Microsecond))
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("two times of one millisecond formatted twice")
	}
	done := make(chan bool)
	for g := range 4 {
		go func() {
			defer func() { done <- true }()
			for i := range 1000 {
				tm := base.Add(time.Duration(g*1000+i) * 300 * time.Microsecond)
				if got, want := c.Format(tm), timestamp.Format(tm); got != want {
					t.Errorf("concurrent Cache.Format(%v) = %s, want %s", tm, got, want)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}
