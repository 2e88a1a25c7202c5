package lastseen

import (
	"testing"
	"time"
)

// TestScratchZeroes: a slice got back after a read wrote in it (and
// appended within its capacity) is all zero again; small ones are not
// kept.
func TestScratchZeroes(t *testing.T) {
	var s scratch[time.Time]
	for round := range 4 {
		n := 200 - 40*round // smaller each time: the kept one serves
		l, box := s.get(n)
		if len(l) != n || box == nil {
			t.Fatalf("round %d: get(%d) gave %d elements, box %v", round, n, len(l), box != nil)
		}
		for i, x := range l[:cap(l)] {
			if !x.IsZero() {
				t.Fatalf("round %d: element %d is %v, want zero", round, i, x)
			}
		}
		for i := range l {
			l[i] = time.Unix(int64(i+1), 0)
		}
		if cap(l) > n {
			l = append(l, time.Unix(9, 0))
		}
		s.put(box, l)
	}
	if l, box := s.get(scratchMin - 1); box != nil || len(l) != scratchMin-1 {
		t.Errorf("get(%d): %d elements, box %v; want a plain slice", scratchMin-1, len(l), box != nil)
	}
	s.put(nil, nil) // a slice not to keep: nothing happens
}
