package presence

import (
	"slices"
	"testing"
	"time"
)

func TestAwayWatch(t *testing.T) {
	w := newAwayWatch()
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w.arm("nobody", at(1)) // no socket here: not watched
	w.add("a")
	w.add("b")
	w.add("b")
	w.arm("a", at(10))
	w.arm("b", at(5))
	if got := w.due(at(4), 10); len(got) != 0 {
		t.Fatalf("due at 4: %q", got)
	}
	w.arm("b", at(8)) // later: its entry comes up at 5 and moves on
	if got := w.due(at(5), 10); len(got) != 0 {
		t.Fatalf("due at 5 after b moved to 8: %q", got)
	}
	if got := w.due(at(9), 10); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("due at 9: %q, want [b]", got)
	}
	if got := w.due(at(9), 10); len(got) != 0 {
		t.Fatalf("b came up twice: %q", got)
	}
	w.arm("a", at(3)) // sooner: a new entry
	if got := w.due(at(3), 10); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("due at 3: %q, want [a]", got)
	}
	if got := w.due(at(20), 10); len(got) != 0 {
		t.Fatalf("a's first entry came up too: %q", got)
	}
	w.arm("a", at(30))
	w.remove("b")
	w.arm("b", at(30)) // one socket of b left
	w.remove("b")      // none: the watch ends
	w.arm("b", at(31))
	w.add("b") // back, with no check until armed
	if got := w.due(at(40), 10); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("due at 40: %q, want [a]", got)
	}
	if n := w.watched(); n != 0 {
		t.Fatalf("%d users still watched", n)
	}
	if len(w.q) != 0 {
		t.Fatalf("%d entries left in the queue", len(w.q))
	}
}

// watched is the number of users this node watches.
func (w *awayWatch) watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, u := range w.users {
		if u.at != 0 {
			n++
		}
	}
	return n
}
