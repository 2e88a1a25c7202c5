package store

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync/atomic"

	"github.com/presenced/presenced/ids"
	"github.com/presenced/presenced/timestamp"
)

// MaxIDs bounds every list argument of the store (a batch of last-seen
// times, a lookup, a contact or member list). Longer lists are refused with
// ErrInvalid, so no caller can build an unbounded statement.
const MaxIDs = 10_000

// Stats counts what a store sent to its database since it was opened. It
// lets a benchmark or a metric see that one call is one statement.
type Stats struct {
	// Statements is the number of write statements (INSERT, UPDATE,
	// DELETE) sent, failed ones included. One UpsertLastSeen with a
	// non-empty batch is exactly one.
	Statements int64
	// Rows is the number of rows those statements changed, as reported by
	// the database (a last-seen row whose stored time is already later is
	// not changed, so it is not counted).
	Rows int64
	// Queries is the number of read queries sent.
	Queries int64
}

// counters are the atomic form of Stats, shared by both implementations.
type counters struct {
	statements, rows, queries atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{Statements: c.statements.Load(), Rows: c.rows.Load(), Queries: c.queries.Load()}
}

// errClosed is the cause of ErrUnavailable once Close has been called.
var errClosed = errors.New("store is closed")

// opError is every error the store returns: the operation, an optional
// sentinel (ErrUnavailable, ErrInvalid) and the cause, all reachable with
// errors.Is and errors.As.
type opError struct {
	op   string
	kind error // ErrUnavailable, ErrInvalid or nil (an internal error)
	err  error
}

func (e *opError) Error() string {
	switch e.kind {
	case ErrUnavailable:
		return "store: " + e.op + ": unavailable: " + e.err.Error()
	case ErrInvalid:
		return "store: " + e.op + ": invalid argument: " + e.err.Error()
	}
	return "store: " + e.op + ": " + e.err.Error()
}

func (e *opError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.err}
	}
	return []error{e.kind, e.err}
}

func invalid(op, format string, args ...any) error {
	return &opError{op: op, kind: ErrInvalid, err: fmt.Errorf(format, args...)}
}

// wrap turns a driver error into the store's: ErrUnavailable when
// transient reports that the database could not be reached or answer in
// time, else an internal error. The driver error stays in the chain.
func wrap(op string, err error, transient func(error) bool) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err
	}
	var kind error
	if commonTransient(err) || transient(err) {
		kind = ErrUnavailable
	}
	return &opError{op: op, kind: kind, err: err}
}

// commonTransient recognises the driver-independent signs of an
// unreachable or overloaded database.
func commonTransient(err error) bool {
	var ne net.Error
	return errors.Is(err, errClosed) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne)
}

func checkID(op, what, id string) error {
	if !ids.Valid(id) {
		return invalid(op, "%s %q is not %s", what, ids.Clip(id), ids.Rule)
	}
	return nil
}

// uniqueIDs validates ids and returns them sorted without duplicates (a
// new slice). Sorting gives concurrent writers one lock order.
func uniqueIDs(op, what string, list []string) ([]string, error) {
	if err := checkIDs(op, what, list); err != nil {
		return nil, err
	}
	return ids.Sorted(list), nil // never nil: pgx sends nil as NULL
}

// checkIDs validates a list of ids: at most MaxIDs, each valid.
func checkIDs(op, what string, list []string) error {
	if len(list) > MaxIDs {
		return invalid(op, "%d %ss, at most %d allowed", len(list), what, MaxIDs)
	}
	for _, id := range list {
		if err := checkID(op, what, id); err != nil {
			return err
		}
	}
	return nil
}

// replaceArgs validates the arguments of a list replace (SetContacts,
// SetMembers): the owner's id and the new list, returned as uniqueIDs.
func replaceArgs(op, keyName, key, listName string, list []string) ([]string, error) {
	if err := checkID(op, keyName, key); err != nil {
		return nil, err
	}
	return uniqueIDs(op, listName, list)
}

// lastSeenRows validates a batch and reduces it to one row per user (the
// latest time wins), sorted by user id, times in Unix milliseconds.
func lastSeenRows(op string, batch []LastSeen) (users []string, ms []int64, err error) {
	if len(batch) > MaxIDs {
		return nil, nil, invalid(op, "%d last-seen rows, at most %d allowed", len(batch), MaxIDs)
	}
	rows := make([]LastSeen, 0, len(batch))
	for _, ls := range batch {
		if err := checkID(op, "user id", ls.UserID); err != nil {
			return nil, nil, err
		}
		if ls.At.IsZero() {
			return nil, nil, invalid(op, "zero last-seen time for user %q", ls.UserID)
		}
		rows = append(rows, ls)
	}
	slices.SortFunc(rows, func(a, b LastSeen) int {
		return cmp.Or(cmp.Compare(a.UserID, b.UserID), b.At.Compare(a.At)) // latest first
	})
	rows = slices.CompactFunc(rows, func(a, b LastSeen) bool { return a.UserID == b.UserID })
	users = make([]string, len(rows))
	ms = make([]int64, len(rows))
	for i, r := range rows {
		users[i], ms[i] = r.UserID, timestamp.Millis(r.At)
	}
	return users, ms, nil
}

// privacyArgs validates the arguments of SetPrivacy.
func privacyArgs(op, userID string, v Visibility) error {
	if err := checkID(op, "user id", userID); err != nil {
		return err
	}
	if !v.Valid() {
		return invalid(op, "visibility %q is not one of everyone, contacts, nobody", ids.Clip(string(v)))
	}
	return nil
}
