package handlers

// popFront removes and returns the first element of *q, false when *q is
// empty. The emptied slice becomes nil, so that its backing array can go.
func popFront[T any](q *[]T) (T, bool) {
	var v T
	if len(*q) == 0 {
		return v, false
	}
	v = (*q)[0]
	*q = (*q)[1:]
	if len(*q) == 0 {
		*q = nil
	}
	return v, true
}
