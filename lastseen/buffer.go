package lastseen

import (
	"context"
	"errors"
	"time"

	"github.com/presenced/presenced/store"
)

// ErrUnavailable wraps a buffer backend (Redis) that cannot be reached.
var ErrUnavailable = errors.New("lastseen: buffer unavailable")

// Buffer holds recent last-seen times between activity and the database:
// a map user → latest time that never moves backwards, a set of dirty
// users (changed since their last write to the store) and the claims of
// flushers that are writing them right now.
//
// Two implementations share one contract and one test suite: Memory (one
// node) and Redis (cluster mode: every node's pipeline shares it).
// Times are kept with millisecond precision, as in the store.
type Buffer interface {
	// Record raises each user's time to the one given, never lowering it,
	// and marks the users whose time rose dirty. Duplicates are allowed
	// (the latest wins).
	Record(ctx context.Context, entries []store.LastSeen) error
	// Raise raises the times of the users the buffer holds already to the
	// ones given, never lowering them; it adds no user and marks none
	// dirty: the caller writes these times to the store itself (the
	// Pipeline's DirectActivity). Duplicates are allowed.
	Raise(ctx context.Context, entries []store.LastSeen) error
	// Get returns the buffered times of userIDs, in the order asked; the
	// zero time where the buffer has none. One round trip.
	Get(ctx context.Context, userIDs []string) ([]time.Time, error)

	// Claim atomically takes up to n dirty users out of the dirty set and
	// records them as claimed at now; it returns them with their current
	// times. A claim ends with Ack (the write succeeded) or Release (it
	// failed); a claim that is never ended is made dirty again by Requeue.
	Claim(ctx context.Context, n int, now time.Time) (Claim, error)
	// Ack ends a claim after its times were written. Users claimed again
	// since (after a Requeue) keep their newer claim.
	Ack(ctx context.Context, c Claim) error
	// Release ends a claim whose write failed: its users are dirty again.
	Release(ctx context.Context, c Claim) error
	// Requeue makes dirty again the users claimed before cutoff (their
	// flusher crashed or hangs) and returns how many.
	Requeue(ctx context.Context, cutoff time.Time) (int, error)

	// Trim forgets up to limit users whose time is before cutoff and who are
	// neither dirty nor claimed (the store holds their time), and returns
	// how many it forgot.
	Trim(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// Stats counts the users held, dirty and claimed.
	Stats(ctx context.Context) (BufferStats, error)
}

// Claim is a batch of users taken by one flusher.
type Claim struct {
	// At identifies the claim: the claim time, in milliseconds. Ack and
	// Release touch only users still claimed at this time.
	At int64
	// Entries are the claimed users with their times when claimed.
	Entries []store.LastSeen
}

// BufferStats counts a buffer's users.
type BufferStats struct {
	Users   int64 // users with a buffered time
	Dirty   int64 // waiting to be written
	Claimed int64 // being written
}
