package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/internal/throttle"
)

// redisLogEvery is how often one kind of go-redis message is logged.
const redisLogEvery = 10 * time.Second

// redisLogger carries go-redis's own messages (a failed dial, a discarded
// connection) into the server's log, in its format, at WARN: go-redis
// would print them as plain text on stderr, among the JSON lines. While
// Redis is down it reports every failed dial, so each kind of message
// (its format) is logged at most once per redisLogEvery, with the number
// of times it came meanwhile.
type redisLogger struct {
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	kinds map[string]*throttle.Log // by format: a bounded set of constants
}

func newRedisLogger(log *slog.Logger) *redisLogger {
	return &redisLogger{log: log, now: time.Now, kinds: map[string]*throttle.Log{}}
}

// Printf implements go-redis's Logging.
func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	k := l.kinds[format]
	if k == nil {
		k = &throttle.Log{Every: redisLogEvery}
		l.kinds[format] = k
	}
	n, ok := k.Fail(now)
	l.mu.Unlock()
	if !ok {
		return
	}
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	l.log.WarnContext(ctx, msg, "count", n)
}
