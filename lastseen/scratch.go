package lastseen

import (
	"sync"
	"time"

	"github.com/presenced/presenced/store"
)

// scratch keeps the slices a read needs only while it runs, for the next
// read: a presence:query of 1,000 ids needed 80 KB of targets, 24 KB of
// buffered times, 8 KB of offline targets and 24 KB of privacy answers and
// positions, a third of the ~400 KB it allocated, and a node of 16 MB of
// live heap collected every 40 or so such queries at Go's default headroom
// (the queries that met one took several times as long). A slice is kept with its elements zeroed (what a
// read left in it is cleared when it is put back), so get gives n zero
// elements as make would.
type scratch[T any] struct{ p sync.Pool }

// scratchMin: smaller slices are made and left to the collector.
const scratchMin = 64

// get returns a slice of n zero elements, and the box to put it back in
// (nil: not to be put back).
func (s *scratch[T]) get(n int) ([]T, *[]T) {
	if n < scratchMin {
		return make([]T, n), nil
	}
	if b, ok := s.p.Get().(*[]T); ok {
		if cap(*b) >= n {
			return (*b)[:n], b
		}
		s.p.Put(b) // too small for this one; kept for the next
	}
	l := make([]T, n)
	return l, &l
}

// put clears used, the slice get gave with b (or what it was appended
// into, within its capacity), and keeps it for another read.
func (s *scratch[T]) put(b *[]T, used []T) {
	if b == nil {
		return
	}
	clear(used[:cap(used)])
	*b = used[:0]
	s.p.Put(b)
}

var (
	targetScratch     scratch[Target]
	offlineScratch    scratch[*Target]
	timeScratch       scratch[time.Time]
	visibilityScratch scratch[store.Visibility]
	positionScratch   scratch[int]
)
