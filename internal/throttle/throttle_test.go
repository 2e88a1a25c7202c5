package throttle

import (
	"testing"
	"time"
)

// TestLogThrottled: a failure repeated every tick gives its first
// line at once, then one per Every with the failures counted
// since, and one line when it ends.
func TestLogThrottled(t *testing.T) {
	o := Log{Every: 10 * time.Second}
	if _, ok := o.Recover(); ok {
		t.Fatal("a recovery logged without a failure")
	}
	t0 := time.Unix(1000, 0)
	if n, ok := o.Fail(t0); !ok || n != 1 {
		t.Fatalf("first failure: %d, %v", n, ok)
	}
	logged := 0
	for i := 1; i < 400; i++ { // 50 ms apart: 20 s
		if n, ok := o.Fail(t0.Add(time.Duration(i) * 50 * time.Millisecond)); ok {
			logged++
			if n != 200 {
				t.Errorf("line %d counts %d failures, want 200", logged, n)
			}
		}
	}
	if logged != 1 {
		t.Errorf("%d lines in the 20 s after the first, want 1", logged)
	}
	if n, ok := o.Recover(); !ok || n != 400 {
		t.Errorf("recovery: %d, %v; want 400, true", n, ok)
	}
	if _, ok := o.Recover(); ok {
		t.Error("a second recovery logged")
	}
	if n, ok := o.Fail(t0.Add(21 * time.Second)); !ok || n != 1 {
		t.Errorf("the next outage's first failure: %d, %v", n, ok)
	}
}

// TestLogRecoverQuiet: successes between failures do not end the run; the
// first success after quiet without a failure does, with every failure
// of the run counted.
func TestLogRecoverQuiet(t *testing.T) {
	o := Log{Every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	lines := 0
	for i := range 20 { // a failure and a success each second for 20 s
		at := t0.Add(time.Duration(i) * time.Second)
		if _, ok := o.Fail(at); ok {
			lines++
		}
		if _, ok := o.RecoverQuiet(at.Add(500*time.Millisecond), 5*time.Second); ok {
			t.Fatalf("recovered %v after the start, between failures", time.Duration(i)*time.Second+500*time.Millisecond)
		}
	}
	if lines != 2 {
		t.Errorf("%d failure lines in 20 s, want 2", lines)
	}
	if _, ok := o.RecoverQuiet(t0.Add(23*time.Second), 5*time.Second); ok {
		t.Error("recovered 4 s after the last failure")
	}
	if n, ok := o.RecoverQuiet(t0.Add(24*time.Second), 5*time.Second); !ok || n != 20 {
		t.Errorf("recovery 5 s after the last failure: %d, %v; want 20, true", n, ok)
	}
	if _, ok := o.RecoverQuiet(t0.Add(30*time.Second), 5*time.Second); ok {
		t.Error("a second recovery logged")
	}
}
