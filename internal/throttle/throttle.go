// Package throttle keeps a failure that repeats (every tick, every dial
// while a backend is down) from filling the log.
package throttle

import "time"

// Log says when to log a repeating failure: the first at once, then one
// line per Every with the failures counted meanwhile, and one when it
// ends. The zero value with Every set is ready; it is not safe for
// concurrent use.
type Log struct {
	Every time.Duration

	last   time.Time // the last line; zero: no failure since the last success
	missed int       // failures since the last line
	total  int       // failures since the last success
}

// Fail counts a failure; it reports whether to log it, with the failures
// since the last line (this one included).
func (l *Log) Fail(now time.Time) (int, bool) {
	l.missed++
	l.total++
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		return 0, false
	}
	n := l.missed
	l.last, l.missed = now, 0
	return n, true
}

// Recover ends a run of failures; it reports whether one was under way,
// with the number of failures it counted.
func (l *Log) Recover() (int, bool) {
	if l.last.IsZero() {
		return 0, false
	}
	n := l.total
	*l = Log{Every: l.Every}
	return n, true
}
