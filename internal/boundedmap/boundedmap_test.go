package boundedmap

import "testing"

func TestMakeRoom(t *testing.T) {
	fill := func(n int) map[int]int {
		m := map[int]int{}
		for i := range n {
			m[i] = i
		}
		return m
	}
	old := func(v int) bool { return v < 3 }
	never := func(int) bool { return false }

	m := fill(9)
	MakeRoom(m, 10, 1, never) // fits
	if len(m) != 9 {
		t.Fatalf("room enough: %d entries left, want 9", len(m))
	}
	m = fill(10)
	MakeRoom(m, 10, 1, old) // the 3 expired go, and that is enough
	if len(m) != 7 {
		t.Fatalf("expired dropped: %d entries left, want 7", len(m))
	}
	for k := range 3 {
		if _, ok := m[k]; ok {
			t.Fatalf("expired entry %d kept", k)
		}
	}
	m = fill(10)
	MakeRoom(m, 10, 2, never) // nothing expired: down to half with the new ones
	if len(m) != 3 {
		t.Fatalf("none expired: %d entries left, want 3 (3 + 2 new <= 10/2)", len(m))
	}
	m = fill(4)
	MakeRoom(m, 10, 20, never) // more new ones than fit: emptied
	if len(m) != 0 {
		t.Fatalf("an oversized batch: %d entries left, want 0", len(m))
	}
}
