package presence

// momentHeap is a min-heap (container/heap) of entries ordered by their
// moment, for the timers a node keeps in memory: the away watch
// (redis_away.go) and typing expiries (redis_typing.go).
type momentHeap[E interface{ moment() int64 }] []E

func (h momentHeap[E]) Len() int           { return len(h) }
func (h momentHeap[E]) Less(i, j int) bool { return h[i].moment() < h[j].moment() }
func (h momentHeap[E]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *momentHeap[E]) Push(x any)        { *h = append(*h, x.(E)) }
func (h *momentHeap[E]) Pop() any {
	old := *h
	var zero E
	x := old[len(old)-1]
	old[len(old)-1] = zero // the popped entry's strings are let go
	*h = old[:len(old)-1]
	return x
}
