// Package memtest is test support for measuring memory. Import it only
// from _test files.
package memtest

import "runtime"

// AllocatedBy reports the bytes fn allocates (the whole process's, so run
// it where nothing else allocates much).
func AllocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
