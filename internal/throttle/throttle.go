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
	failed time.Time // the last failure
	missed int       // failures since the last line
	total  int       // failures since the last success
}

// Fail counts a failure; it reports whether to log it, with the failures
// since the last line (this one included).
func (l *Log) Fail(now time.Time) (int, bool) {
	l.missed++
	l.total++
	l.failed = now
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

// RecoverQuiet is Recover once quiet has passed since the last failure at
// now: in an outage where some operations fail and some succeed (a Redis
// Cluster master down, the others up), a success between failures does
// not end the run, and the log does not flap between failing and
// recovered lines with a count of 1 each.
func (l *Log) RecoverQuiet(now time.Time, quiet time.Duration) (int, bool) {
	if l.last.IsZero() || now.Sub(l.failed) < quiet {
		return 0, false
	}
	return l.Recover()
}
