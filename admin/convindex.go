package admin

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/presence"
)

// convIndex serves the conversation list in cluster mode from a snapshot.
// Redis keeps no index of conversations (the hot path needs none), so the
// Redis engine finds them with a SCAN of the whole keyspace: ~300 ms with
// 100,000 users online, too slow for a request. The snapshot is taken once
// when the node starts (warm), then refreshed off the request path every
// PublishEvery while the panel is in use (a request within the last
// minute). A request after a longer idle period is answered at once from
// the older snapshot and starts the refresh; the page's live updates bring
// the fresh list a moment later. Only a request that finds no snapshot at
// all (within the first scan after start) waits for a scan. In memory mode
// the engine answers directly (milliseconds), and no snapshot is kept.
type convIndex struct {
	view  presence.AdminView
	every time.Duration

	scanMu sync.Mutex // one synchronous scan at a time (cold requests wait for it)

	mu         sync.Mutex
	all        []presence.ConversationCount // busiest first
	at         time.Time                    // when all was read; zero: never
	used       time.Time                    // the last request
	refreshing bool
	failed     error // the last background refresh's error; nil once one succeeds
}

// idleAfter: with no request for this long the snapshot is no longer kept
// fresh.
const idleAfter = time.Minute

// page answers like AdminView.ConversationCounts, from the snapshot.
func (x *convIndex) page(ctx context.Context, prefix string, offset, limit int) (int, []presence.ConversationCount, error) {
	x.mu.Lock()
	now := time.Now()
	x.used = now
	have := !x.at.IsZero() // a stale snapshot is answered at once (maybeRefresh renews it)
	all, at, failed := x.all, x.at, x.failed
	x.mu.Unlock()
	if have && failed != nil {
		// the list shown would be older with each update, and look live
		// (an audit, 2026-12-07: nothing said so, nothing was logged)
		return 0, nil, fmt.Errorf("the conversation list could not be read again (the last one is %s old): %w", now.Sub(at).Round(time.Second), failed)
	}
	if !have {
		x.scanMu.Lock()
		x.mu.Lock()
		have = !x.at.IsZero() // another request's scan
		x.mu.Unlock()
		var err error
		if !have {
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
	inUse := !x.used.IsZero() && now.Sub(x.used) < idleAfter
	due := (inUse || x.at.IsZero()) && now.Sub(x.at) >= x.every && !x.refreshing // x.at zero: the warm-up
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
		err := x.refresh(rctx)
		x.mu.Lock()
		x.failed = err // the next request sees it (page)
		x.mu.Unlock()
	}()
}
