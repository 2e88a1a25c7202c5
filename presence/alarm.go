package presence

import (
	"slices"
	"sync"
	"time"
)

// alarmStep is the resolution of the flap grace's alarm: moments are
// rounded up to it. alarmGap is the least time between two of its wakes,
// so that a burst of disconnects wakes the timer loop at most once per
// gap, while a grace that ends alone is acted on within a millisecond.
// With moments rounded up to 5 ms, the offline update came 2.5 ms late on
// average.
const (
	alarmStep = time.Millisecond
	alarmGap  = 5 * time.Millisecond
)

// typingAlarmStep and typingAlarmGap shape the typing alarm (the Redis
// engine's typingAlarm): it rings when an entry this node wrote expires
// (its moment rounded up to 5 ms), but no sooner than typingAlarmGap
// after its last ring, so that a node checks its expiries at most 50
// times a second, each check one transaction for all that are due
// (MULTI, then per conversation ZRANGEBYSCORE and ZREMRANGEBYSCORE,
// EXEC). The 5 ms steps keep the moments pending under alarmMax for a
// TTL up to 20 s, whatever the rate of starts (1 ms steps would not past
// 820 starts a second on a 5 s TTL: the moments beyond the bound wait for
// the tick).
//
// Until 2026-12-08 the moments were rounded up to 50 ms steps: with 100
// expiries a second the stops of 5 went out together, 5 × 99 deliveries
// at once, and the starts arriving meanwhile waited behind them (the
// typing benchmark on two nodes at 100 changes/s, 2,000 members: delivery
// p99 8.9-11.2 ms, the Node peer's 9.3-12.1). With 5 ms steps and no
// gap: p99 6.6-10.1 ms, but 7.1 Redis commands and 3.6 reads a change
// against 6.25 and 2.9 (the peer's 6.50 and 3.50); with 1 ms steps and
// the 20 ms gap: p99 7.7-9.8 ms at 6.55 commands and 3.2 reads (three
// rounds each, one run, 2026-12-08). An expiry's stop goes out up to
// 25 ms after the TTL, on a TTL of seconds. (An earlier version of this
// alarm, with 5 ms steps and no gap, cost more CPU at 500 changes/s than
// the bursts it spread saved; the gap bounds the wakes whatever the
// rate.)
const (
	typingAlarmStep = 5 * time.Millisecond
	typingAlarmGap  = 20 * time.Millisecond
)

// alarmMax bounds the moments an alarm keeps; past it, moments are not
// kept and their timers wait for the tick, as every timer did before.
const alarmMax = 4096

// alarm wakes an engine's timer loop when a flap grace this node started
// ends, so that the leaves and the offline update go out then, not at the
// next tick (up to tickEvery later: 25 ms at the median). The Redis engine
// has a second one for the expiries of its typing entries. It only hurries
// the loop: the timers themselves stay where they are (in Redis, or in
// the memory backend), and a moment missed or rung early costs nothing but
// the wait for the next tick. Timers another node started still wait for
// a tick.
type alarm struct {
	C chan struct{} // receives when a moment has come (buffered: one wake covers many)

	step time.Duration // moments are rounded up to it
	gap  time.Duration // the least time between two wakes

	mu       sync.Mutex
	at       []time.Time // pending moments, sorted, distinct
	timer    *time.Timer
	lastRing time.Time
}

func newAlarm(step, gap time.Duration) *alarm {
	a := &alarm{C: make(chan struct{}, 1), step: step, gap: gap}
	a.timer = time.AfterFunc(time.Hour, a.ring)
	a.timer.Stop()
	return a
}

// set asks for a wake at t or within the alarm's step after it.
func (a *alarm) set(t time.Time) {
	t = t.Truncate(a.step).Add(a.step)
	a.mu.Lock()
	defer a.mu.Unlock()
	i, found := slices.BinarySearchFunc(a.at, t, time.Time.Compare)
	if found || len(a.at) >= alarmMax {
		return
	}
	a.at = slices.Insert(a.at, i, t)
	if i == 0 {
		a.timer.Reset(a.wait(time.Now()))
	}
}

// wait is how long the timer waits from now for the first moment, no
// shorter than what is left of the gap since the last wake. Called with
// mu held and a moment pending.
func (a *alarm) wait(now time.Time) time.Duration {
	return max(a.at[0].Sub(now), a.lastRing.Add(a.gap).Sub(now))
}

// ring runs on the timer: it drops the moments that have come, sets the
// timer for the next one and wakes the loop.
func (a *alarm) ring() {
	a.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(a.at) && !a.at[n].After(now) {
		n++
	}
	a.at = slices.Delete(a.at, 0, n)
	if n > 0 {
		a.lastRing = now
	}
	if len(a.at) > 0 {
		a.timer.Reset(a.wait(now))
	}
	a.mu.Unlock()
	if n > 0 {
		select {
		case a.C <- struct{}{}:
		default:
		}
	}
}

// stop ends the alarm's timer; pending moments are dropped.
func (a *alarm) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer.Stop()
	a.at = nil
}
