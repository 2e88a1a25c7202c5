package admin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
)

// slowView is an AdminView whose conversation scan takes a while and
// counts its calls; the other methods are not used here.
type slowView struct {
	presence.AdminView
	scans atomic.Int32
	delay time.Duration
	mu    sync.Mutex
	convs []presence.ConversationCount
	fail  error
}

func (v *slowView) ConversationCounts(ctx context.Context, _ string, _, _ int) (int, []presence.ConversationCount, error) {
	v.scans.Add(1)
	time.Sleep(v.delay)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.fail != nil {
		return 0, nil, v.fail
	}
	return len(v.convs), append([]presence.ConversationCount(nil), v.convs...), nil
}

// The node warms its snapshot at start; a request after a long idle time
// is answered from the old snapshot at once, and starts the refresh.
func TestConvIndexWarmAndStale(t *testing.T) {
	v := &slowView{delay: 300 * time.Millisecond, convs: []presence.ConversationCount{{ID: "a", Online: 2}}}
	x := &convIndex{view: v, every: 10 * time.Millisecond}
	ctx := context.Background()

	x.maybeRefresh(ctx) // Run's first tick: the warm-up, though nobody asked
	deadline := time.Now().Add(3 * time.Second)
	for {
		x.mu.Lock()
		warm := !x.at.IsZero()
		x.mu.Unlock()
		if warm {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no warm-up scan")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// long idle: the snapshot is stale, and the list has changed meanwhile
	x.mu.Lock()
	x.at = time.Now().Add(-10 * time.Minute)
	x.used = time.Now().Add(-10 * time.Minute)
	x.mu.Unlock()
	v.mu.Lock()
	v.convs = append(v.convs, presence.ConversationCount{ID: "b", Online: 1})
	v.mu.Unlock()

	start := time.Now()
	total, page, err := x.page(ctx, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("a stale snapshot waited for a scan (%v)", d)
	}
	if total != 1 || page[0].ID != "a" {
		t.Fatalf("stale answer: %d %+v", total, page)
	}
	x.maybeRefresh(ctx) // the next tick renews it, the panel being in use again
	deadline = time.Now().Add(3 * time.Second)
	for {
		total, _, _ = x.page(ctx, "", 0, 100)
		if total == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot was not renewed after the request")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A snapshot that could not be read again is not answered as if it were
// live: the request gets the error (the page shows it, with the old list
// marked stale), until a refresh succeeds.
func TestConvIndexRefreshFailureShown(t *testing.T) {
	v := &slowView{convs: []presence.ConversationCount{{ID: "a", Online: 2}}}
	x := &convIndex{view: v, every: time.Millisecond}
	ctx := context.Background()
	if total, _, err := x.page(ctx, "", 0, 100); err != nil || total != 1 {
		t.Fatalf("first page: %d %v", total, err)
	}
	v.mu.Lock()
	v.fail = errors.New("NOPERM SCAN")
	v.mu.Unlock()
	refreshed := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for {
			x.maybeRefresh(ctx)
			time.Sleep(5 * time.Millisecond)
			x.mu.Lock()
			failed := x.failed != nil
			x.mu.Unlock()
			if failed == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("refresh failed %v, want %v", failed, want)
			}
		}
	}
	refreshed(true)
	if _, _, err := x.page(ctx, "", 0, 100); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a page after a failed refresh: %v, want the error", err)
	}
	v.mu.Lock()
	v.fail = nil
	v.mu.Unlock()
	refreshed(false)
	if total, _, err := x.page(ctx, "", 0, 100); err != nil || total != 1 {
		t.Fatalf("after a refresh that succeeded: %d %v", total, err)
	}
}
