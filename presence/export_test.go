package presence

import "time"

// SetRedisClock replaces Redis's clock, as the engine's scripts read it,
// with a test's fake clock.
func SetRedisClock(e *RedisEngine, now func() time.Time) { e.fakeClock = now }
