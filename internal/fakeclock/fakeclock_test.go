package fakeclock

import (
	"sync"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	c := New(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %v", c.Now())
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { c.Advance(time.Second) })
	}
	wg.Wait()
	if got := c.Now(); !got.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("after ten concurrent seconds: %v", got)
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Fatal("Set did not set")
	}
	if (&Clock{}).Now() != (time.Time{}) {
		t.Fatal("the zero Clock does not read the zero time")
	}
}
