// Package logbuf is a log destination for tests that many goroutines
// write to at once.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer keeps what is written to it; its methods are safe for
// concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Count is how many lines contain all of parts.
func (l *Buffer) Count(parts ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all && line != "" {
			n++
		}
	}
	return n
}
