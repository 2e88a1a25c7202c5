package store

import (
	"context"
	"time"
)

// OnlineKeeper is kept by a single node (no Redis), whose presence lives
// in its memory, for its crash recovery. At each last-seen flush the node
// writes the changes to the users it has online and the moment it was
// alive; a start after a crash (the list not emptied by a clean shutdown)
// gives each user still listed that moment as their last-seen, as a
// cluster's surviving node gives a dead node's users its last lease. Both
// stores keep it; a cluster does not use it.
type OnlineKeeper interface {
	// KeepOnline notes, in one transaction, that the node was alive at
	// alive (zero: the moment noted before stays), that the users of
	// online are online and those of offline are not (each list at most
	// MaxIDs; a user in both is offline).
	KeepOnline(ctx context.Context, alive time.Time, online, offline []string) error
	// RecoverOnline gives every user listed online the last alive moment
	// as last-seen (the later of that and the stored time wins), empties
	// the list, and returns how many users it held.
	RecoverOnline(ctx context.Context) (int, error)
}

// onlineArgs validates KeepOnline's arguments: the lists as unique ids,
// and the moment in Unix milliseconds (0: none).
func onlineArgs(op string, alive time.Time, online, offline []string) (on, off []string, ms int64, err error) {
	if !alive.IsZero() && alive.UnixMilli() <= 0 {
		return nil, nil, 0, invalid(op, "alive time before 1970")
	}
	if on, err = uniqueIDs(op, "user id", online); err != nil {
		return nil, nil, 0, err
	}
	if off, err = uniqueIDs(op, "user id", offline); err != nil {
		return nil, nil, 0, err
	}
	if alive.IsZero() {
		return on, off, 0, nil
	}
	return on, off, alive.UnixMilli(), nil
}
