package presence

import (
	"slices"
	"testing"
	"time"
)

// A conversation's moment is its earliest; take hands each due
// conversation out once, in order of its moment, up to the limit, and
// skips the moments an earlier one replaced.
func TestTypingTimers(t *testing.T) {
	var tt typingTimers
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tt.set("c1", at(500))
	tt.set("c1", at(900)) // later: c1 keeps 500
	tt.set("c2", at(800))
	tt.set("c2", at(300)) // earlier: 300 (the 800 left in the queue is skipped)
	tt.set("c3", at(700))
	if got := tt.take(at(299), 10); len(got) != 0 {
		t.Fatalf("take before any moment %q", got)
	}
	if got := tt.take(at(700), 2); !slices.Equal(got, []string{"c2", "c1"}) {
		t.Fatalf("take(700, 2) %q, want c2 c1", got)
	}
	if got := tt.take(at(2000), 10); !slices.Equal(got, []string{"c3"}) {
		t.Fatalf("take(2000) %q, want c3 alone (c1's 900 and c2's 800 were replaced)", got)
	}
	tt.set("c1", at(2500))
	if got := tt.take(at(2500), 10); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("a moment set after its take: %q", got)
	}
	if len(tt.at) != 0 || len(tt.queue) != 0 {
		t.Fatalf("left: %v %v", tt.at, tt.queue)
	}
}
