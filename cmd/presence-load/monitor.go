//go:build linux

package main

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// anatomy is what Redis MONITOR saw of the commands naming the key
// prefix during a sample: the commands the server sent (each a request on
// a connection; pipelined ones share a round trip) and those a Lua script
// ran inside Redis.
type anatomy struct {
	top map[string]int
	lua map[string]int
}

func (a anatomy) totals() (top, lua int) {
	for _, v := range a.top {
		top += v
	}
	for _, v := range a.lua {
		lua += v
	}
	return
}

// monitor is a raw MONITOR connection collecting the commands that
// mention a string (the key prefix).
type monitor struct {
	c      net.Conn
	filter string
	mu     sync.Mutex
	seen   []monLine
	done   chan struct{}
}

type monLine struct {
	at  time.Time // Redis's timestamp of the command
	cmd string
	lua bool
}

func startMonitor(redisURL, filter string) (*monitor, error) {
	u, err := url.Parse(redisURL)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(c, 1<<16)
	if pw, ok := u.User.Password(); ok {
		fmt.Fprintf(c, "AUTH %s %s\r\n", u.User.Username(), pw)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			c.Close()
			return nil, fmt.Errorf("monitor auth: %q %v", line, err)
		}
	}
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		c.Close()
		return nil, fmt.Errorf("monitor: %q %v", line, err)
	}
	m := &monitor{c: c, filter: filter, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if !strings.Contains(line, filter) {
				continue
			}
			// +1700000000.123456 [0 127.0.0.1:54321] "evalsha" "…" …
			i := strings.Index(line, "] \"")
			if i < 0 {
				continue
			}
			src := line[:i]
			rest := line[i+3:]
			sp := strings.IndexByte(src, ' ')
			if sp < 1 {
				continue
			}
			ts, err := strconv.ParseFloat(strings.TrimPrefix(src[:sp], "+"), 64)
			if err != nil {
				continue
			}
			j := strings.IndexByte(rest, '"')
			if j < 0 {
				continue
			}
			cmd := strings.ToLower(rest[:j])
			sec, frac := math.Modf(ts)
			m.mu.Lock()
			m.seen = append(m.seen, monLine{at: time.Unix(int64(sec), int64(frac*1e9)), cmd: cmd, lua: strings.HasSuffix(src, " lua")})
			m.mu.Unlock()
		}
	}()
	return m, nil
}

// stop ends the capture and returns what it saw between from and to
// (Redis's clock: the same machine). MONITOR output lags a little behind
// the commands: it waits a moment before stopping.
func (m *monitor) stop(from, to time.Time) anatomy {
	time.Sleep(300 * time.Millisecond)
	m.c.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	a := anatomy{top: map[string]int{}, lua: map[string]int{}}
	for _, l := range m.seen {
		if l.at.Before(from) || l.at.After(to) {
			continue
		}
		if l.lua {
			a.lua[l.cmd]++
		} else {
			a.top[l.cmd]++
		}
	}
	return a
}

// perOp formats a command count map divided by n, largest first.
func perOp(counts map[string]int, n int) string {
	if n == 0 || len(counts) == 0 {
		return "-"
	}
	var parts []string
	for _, e := range largestFirst(counts) {
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(e.k), float64(e.v)/float64(n)))
	}
	return strings.Join(parts, ", ")
}
