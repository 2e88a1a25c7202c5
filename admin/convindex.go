package admin

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/presence"
)

// convIndex serves the conversation list in cluster mode from a snapshot.
// Redis keeps no index of conversations (the hot path needs none), so the
// Redis engine finds them with a SCAN of the whole keyspace: ~300 ms with
// 100,000 users online, too slow for a request. The snapshot is refreshed
// off the request path, every PublishEvery while the panel is in use (a
// request within the last minute); a request after a longer idle period
// waits for one scan. In memory mode the engine answers directly
// (milliseconds), and no snapshot is kept.
type convIndex struct {
	view  presence.AdminView
	every time.Duration

	scanMu sync.Mutex // one synchronous scan at a time (cold requests wait for it)

	mu         sync.Mutex
	all        []presence.ConversationCount // busiest first
	at         time.Time                    // when all was read; zero: never
	used       time.Time                    // the last request
	refreshing bool
}

// idleAfter: with no request for this long the snapshot is no longer kept
// fresh.
const idleAfter = time.Minute

// page answers like AdminView.ConversationCounts, from the snapshot.
func (x *convIndex) page(ctx context.Context, prefix string, offset, limit int) (int, []presence.ConversationCount, error) {
	x.mu.Lock()
	now := time.Now()
	x.used = now
	fresh := !x.at.IsZero() && now.Sub(x.at) < idleAfter
	all := x.all
	x.mu.Unlock()
	if !fresh {
		x.scanMu.Lock()
		x.mu.Lock()
		fresh = !x.at.IsZero() && time.Since(x.at) < idleAfter // another request's scan
		x.mu.Unlock()
		var err error
		if !fresh {
			err = x.refresh(ctx)
		}
		x.scanMu.Unlock()
		if err != nil {
			return 0, nil, err
		}
		x.mu.Lock()
		all = x.all
		x.mu.Unlock()
	}
	var match []presence.ConversationCount
	if prefix == "" {
		match = all
	} else {
		for _, c := range all {
			if strings.HasPrefix(c.ID, prefix) {
				match = append(match, c)
			}
		}
	}
	offset = min(max(offset, 0), len(match))
	end := min(offset+max(limit, 0), len(match))
	return len(match), append([]presence.ConversationCount(nil), match[offset:end]...), nil
}

// refresh reads every conversation now.
func (x *convIndex) refresh(ctx context.Context) error {
	_, all, err := x.view.ConversationCounts(ctx, "", 0, math.MaxInt32)
	if err != nil {
		return err
	}
	x.mu.Lock()
	x.all, x.at = all, time.Now()
	x.mu.Unlock()
	return nil
}

// maybeRefresh refreshes the snapshot in the background when the panel is
// in use and the snapshot is older than the refresh period; Run calls it.
func (x *convIndex) maybeRefresh(ctx context.Context) {
	x.mu.Lock()
	now := time.Now()
	due := !x.used.IsZero() && now.Sub(x.used) < idleAfter && now.Sub(x.at) >= x.every && !x.refreshing
	if due {
		x.refreshing = true
	}
	x.mu.Unlock()
	if !due {
		return
	}
	go func() {
		defer func() {
			x.mu.Lock()
			x.refreshing = false
			x.mu.Unlock()
		}()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = x.refresh(rctx) // the next request sees the error if it persists
	}()
}
