// Package timestamp holds the contract's two forms of a time (CONTRACT §1):
// the text (RFC 3339, UTC, milliseconds) and Unix milliseconds.
package timestamp

import (
	"sync/atomic"
	"time"
)

// Layout is the text form: RFC 3339, milliseconds; in UTC it ends in "Z".
const Layout = "2006-01-02T15:04:05.000Z07:00"

// Format writes t in UTC as Layout. (By hand: it is on every heartbeat's
// ack, and time.Format is slow.)
func Format(t time.Time) string {
	t = t.UTC()
	y, mo, d := t.Date()
	if y < 0 || y > 9999 {
		return t.Format(Layout)
	}
	h, mi, sec := t.Clock()
	b := [24]byte{4: '-', 7: '-', 10: 'T', 13: ':', 16: ':', 19: '.', 23: 'Z'}
	put := func(at, v, n int) {
		for i := at + n - 1; i >= at; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, y, 4)
	put(5, int(mo), 2)
	put(8, d, 2)
	put(11, h, 2)
	put(14, mi, 2)
	put(17, sec, 2)
	put(20, t.Nanosecond()/1e6, 3)
	return string(b[:])
}

// Millis is t in Unix milliseconds.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis is the inverse of Millis, in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// Cache formats times as Format does, sharing one string among the times
// of a millisecond: the heartbeat's ack carries the server's time, and at
// tens of thousands of heartbeats a second, formatting each anew was one
// allocation in four of the direct path. Safe for concurrent use.
type Cache struct{ last atomic.Pointer[cachedTime] }

type cachedTime struct {
	ms int64
	s  string
}

// Format is Format(t), the string of the last call when it was of the same
// millisecond.
func (c *Cache) Format(t time.Time) string {
	ms := t.UnixMilli()
	if l := c.last.Load(); l != nil && l.ms == ms && ms >= 0 {
		return l.s
	}
	s := Format(t)
	c.last.Store(&cachedTime{ms, s})
	return s
}
