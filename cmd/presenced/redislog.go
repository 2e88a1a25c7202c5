package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
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
	kinds map[string]*redisLogKind // by format: a bounded set of constants
}

type redisLogKind struct {
	last   time.Time
	missed int
}

func newRedisLogger(log *slog.Logger) *redisLogger {
	return &redisLogger{log: log, now: time.Now, kinds: map[string]*redisLogKind{}}
}

// Printf implements go-redis's Logging.
func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	k := l.kinds[format]
	if k == nil {
		k = &redisLogKind{}
		l.kinds[format] = k
	}
	k.missed++
	if !k.last.IsZero() && now.Sub(k.last) < redisLogEvery {
		l.mu.Unlock()
		return
	}
	n := k.missed
	k.last, k.missed = now, 0
	l.mu.Unlock()
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	l.log.WarnContext(ctx, msg, "count", n)
}
