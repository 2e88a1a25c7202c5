package presence

import (
	"context"
	"sync"
	"time"

	"github.com/presenced/presenced/internal/boundedmap"
)

// Membership decides who may join a conversation.
type Membership interface {
	IsMember(ctx context.Context, conversationID, userID string) (bool, error)
}

// Open lets any authenticated user join any conversation
// (PRESENCE_MEMBERSHIP=open).
type Open struct{}

// IsMember implements Membership.
func (Open) IsMember(context.Context, string, string) (bool, error) { return true, nil }

// MemberStore is the durable membership a cache reads through.
type MemberStore interface {
	IsMember(ctx context.Context, conversationID, userID string) (bool, error)
}

// CachedMembership reads membership through a cache whose answers are at
// most MaxAge old; Forget drops a conversation's answers at once (when its
// member list is replaced, through any node).
type CachedMembership struct {
	store  MemberStore
	maxAge time.Duration
	now    func() time.Time
	max    int

	mu      sync.Mutex
	entries map[[2]string]cached
	// forgets counts Forget calls: an answer whose store read spanned one
	// may predate the change and is returned but not cached.
	forgets uint64
}

type cached struct {
	member bool
	at     time.Time
}

// MembershipStaleIfDown is how old a cached answer may be that IsMember
// gives when the store fails.
const MembershipStaleIfDown = 10 * time.Minute

// NewCachedMembership caches answers for maxAge (default 5s), keeping at
// most maxEntries (default 100,000; when full, the expired entries are
// dropped, and if that is not enough, an arbitrary half).
func NewCachedMembership(s MemberStore, maxAge time.Duration, maxEntries int) *CachedMembership {
	if maxAge <= 0 {
		maxAge = 5 * time.Second
	}
	if maxEntries <= 0 {
		maxEntries = 100_000
	}
	return &CachedMembership{store: s, maxAge: maxAge, now: time.Now, max: maxEntries, entries: map[[2]string]cached{}}
}

// IsMember implements Membership.
func (c *CachedMembership) IsMember(ctx context.Context, conv, user string) (bool, error) {
	key := [2]string{conv, user}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	gen := c.forgets
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.maxAge {
		return e.member, nil
	}
	member, err := c.store.IsMember(ctx, conv, user)
	if err != nil {
		// The store is down: an answer it gave is still the latest one
		// (a change of the member list is written to the store, and drops
		// the answers through Forget), so it stands in for a while, and
		// sockets that left a conversation can join it again. Before, every
		// join whose answer was over maxAge old was refused unavailable
		// while PostgreSQL was down (a docs audit, 2026-12-07).
		if ok && now.Sub(e.at) < MembershipStaleIfDown && ctx.Err() == nil {
			return e.member, nil
		}
		return false, err
	}
	c.mu.Lock()
	if c.forgets == gen {
		if _, ok := c.entries[key]; !ok {
			boundedmap.MakeRoom(c.entries, c.max, 1, func(e cached) bool { return now.Sub(e.at) >= c.maxAge })
		}
		c.entries[key] = cached{member: member, at: now}
	}
	c.mu.Unlock()
	return member, nil
}

// Forget drops the cached answers of a conversation (its member list was
// replaced, on this node or another).
func (c *CachedMembership) Forget(conv string) {
	c.mu.Lock()
	c.forgets++
	for k := range c.entries {
		if k[0] == conv {
			delete(c.entries, k)
		}
	}
	c.mu.Unlock()
}

// ForgetAll drops every cached answer: this node may have missed changes
// of member lists made through other nodes (handlers.ResyncAfterGap).
func (c *CachedMembership) ForgetAll() {
	c.mu.Lock()
	c.forgets++
	clear(c.entries)
	c.mu.Unlock()
}
