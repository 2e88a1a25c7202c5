package lastseen_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
)

// BenchmarkRecord measures the common case: activity within the coarse
// interval, one map lookup under a mutex.
func BenchmarkRecord(b *testing.B) {
	p := lastseen.NewPipeline(lastseen.NewMemory(), newFakeStore(), lastseen.Config{})
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("user%05d", i)
		must(b, p.Record(b.Context(), ids[i], t0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		_ = p.Record(b.Context(), ids[i%len(ids)], t0.Add(time.Duration(i)*time.Microsecond))
		i++
	}
}
