package store

import (
	"context"
	"time"

	"github.com/presenced/presenced/internal/coalesce"
)

// coalescedReaders bounds the reads of each kind a Coalesced store runs at
// once; the lookups made meanwhile share the next statement.
const coalescedReaders = 2

// coalescedTimeout bounds a shared read (its callers wait only as long as
// their own contexts allow).
const coalescedTimeout = 10 * time.Second

// Coalesced returns s with its LastSeen and Privacy reads shared between
// concurrent callers (internal/coalesce): while two reads of a kind run,
// the lookups that arrive wait for one statement that reads all their ids.
// A burst of presence:subscribe or presence:query (a reconnect storm) so
// costs a few statements instead of one per lookup queued on the pool;
// a lone lookup is sent at once, as without it. Each caller's ids are
// validated first, so a bad id fails only its own call.
func Coalesced(s Store) Store {
	return &coalesced{
		Store:    s,
		lastSeen: coalesce.New(s.LastSeen, coalescedReaders, MaxIDs, coalescedTimeout),
		privacy:  coalesce.New(s.Privacy, coalescedReaders, MaxIDs, coalescedTimeout),
	}
}

type coalesced struct {
	Store
	lastSeen *coalesce.Reader[time.Time]
	privacy  *coalesce.Reader[Visibility]
}

// LastSeen implements Store.
func (c *coalesced) LastSeen(ctx context.Context, userIDs []string) (map[string]time.Time, error) {
	if err := checkIDs("last seen", "user id", userIDs); err != nil {
		return nil, err
	}
	return c.lastSeen.Get(ctx, userIDs)
}

// Privacy implements Store.
func (c *coalesced) Privacy(ctx context.Context, userIDs []string) (map[string]Visibility, error) {
	if err := checkIDs("privacy", "user id", userIDs); err != nil {
		return nil, err
	}
	return c.privacy.Get(ctx, userIDs)
}
