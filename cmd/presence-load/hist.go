//go:build linux

package main

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
)

// hist is a lock-free log-linear latency histogram in microseconds:
// exact below 128 µs, then 64 sub-buckets per power of two (at most 1.6 %
// relative error), up to about an hour.
type hist struct {
	buckets [64 * 64]atomic.Uint64
	count   atomic.Uint64
	sum     atomic.Uint64 // µs
	max     atomic.Uint64 // µs
}

func bucketOf(v uint64) int {
	if v < 128 {
		return int(v)
	}
	e := bits.Len64(v) - 7
	m := v >> uint(e)
	i := 128 + (e-1)*64 + int(m-64)
	if i >= 64*64 {
		i = 64*64 - 1
	}
	return i
}

// bucketMid is a representative value (µs) of bucket i.
func bucketMid(i int) float64 {
	if i < 128 {
		return float64(i) + 0.5
	}
	e := (i-128)/64 + 1
	m := uint64((i-128)%64 + 64)
	lo := m << uint(e)
	hi := (m + 1) << uint(e)
	return float64(lo+hi) / 2
}

func (h *hist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	v := uint64(d / time.Microsecond)
	h.buckets[bucketOf(v)].Add(1)
	h.count.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// quantile returns the q-quantile (0..1).
func (h *hist) quantile(q float64) time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	target := uint64(q*float64(n) + 0.5)
	if target < 1 {
		target = 1
	}
	var seen uint64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= target {
			v := bucketMid(i)
			if mx := float64(h.max.Load()); v > mx {
				v = mx
			}
			return time.Duration(v * float64(time.Microsecond))
		}
	}
	return h.maxDur()
}

func (h *hist) maxDur() time.Duration { return time.Duration(h.max.Load()) * time.Microsecond }

func (h *hist) mean() time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load()/n) * time.Microsecond
}

// summary is "n=… p50=… p90=… p99=… max=…".
func (h *hist) summary() string {
	if h.count.Load() == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s", h.count.Load(),
		ms(h.quantile(0.5)), ms(h.quantile(0.9)), ms(h.quantile(0.99)), ms(h.maxDur()))
}

// ms formats a duration in milliseconds with a sensible precision.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f < 10:
		return fmt.Sprintf("%.2fms", f)
	case f < 100:
		return fmt.Sprintf("%.1fms", f)
	default:
		return fmt.Sprintf("%.0fms", f)
	}
}
