package store

import (
	"context"
	"time"

	"github.com/presenced/presenced/timestamp"
)

// The read paths are the same on both backends but for their SQL and how
// a list of ids travels as one parameter; they live here once.

// rowScanner is a row of either driver (pgx.Rows, *sql.Rows).
type rowScanner interface{ Scan(dest ...any) error }

// querier is a backend's read side.
type querier interface {
	// query runs one read statement and calls scan for each row.
	query(ctx context.Context, op, sql string, args []any, scan func(rowScanner) error) error
	// idList turns a list of ids into the statement parameter that the
	// backend's list statements expect.
	idList(ids []string) any
}

// readSQL are a backend's read statements. A statement reading a list
// takes it as its first parameter.
type readSQL struct {
	lastSeen      string // (ids) → user_id, seen_at
	privacy       string // (ids) → user_id, last_seen
	contactOf     string // (owners, viewer) → owner_id
	contactsAmong string // (candidates, owner) → contact_id
	isMember      string // (conversation, user) → bool
}

// reader implements Store's reads for a backend: its querier, with its
// statements. Both backends embed one.
type reader struct {
	q   querier
	sql readSQL
}

// LastSeen implements Store.
func (r reader) LastSeen(ctx context.Context, userIDs []string) (map[string]time.Time, error) {
	return readLastSeen(ctx, r.q, r.sql.lastSeen, userIDs)
}

// Privacy implements Store.
func (r reader) Privacy(ctx context.Context, userIDs []string) (map[string]Visibility, error) {
	return readPrivacy(ctx, r.q, r.sql.privacy, userIDs)
}

// ContactsAmong implements Store.
func (r reader) ContactsAmong(ctx context.Context, owner string, candidates []string) (map[string]bool, error) {
	return readPairs(ctx, r.q, "contacts among", r.sql.contactsAmong, owner, "owner id", candidates, "candidate id")
}

// ContactOf implements Store.
func (r reader) ContactOf(ctx context.Context, owners []string, viewer string) (map[string]bool, error) {
	return readPairs(ctx, r.q, "contact of", r.sql.contactOf, viewer, "viewer id", owners, "owner id")
}

// IsMember implements Store.
func (r reader) IsMember(ctx context.Context, conversationID, userID string) (bool, error) {
	return readIsMember(ctx, r.q, r.sql.isMember, conversationID, userID)
}

func readLastSeen(ctx context.Context, q querier, sql string, userIDs []string) (map[string]time.Time, error) {
	return readByID(ctx, q, "last seen", sql, userIDs, timestamp.FromMillis)
}

func readPrivacy(ctx context.Context, q querier, sql string, userIDs []string) (map[string]Visibility, error) {
	out, err := readByID(ctx, q, "privacy", sql, userIDs, func(v string) Visibility { return Visibility(v) })
	if err != nil {
		return nil, err
	}
	for _, id := range userIDs {
		if _, ok := out[id]; !ok {
			out[id] = DefaultVisibility
		}
	}
	return out, nil
}

// readByID reads one value per user id of a list: sql selects (id, raw)
// rows for the list, and conv makes each raw column value a V. Ids
// without a row are absent from the result.
func readByID[R, V any](ctx context.Context, q querier, op, sql string, userIDs []string, conv func(R) V) (map[string]V, error) {
	ids, err := uniqueIDs(op, "user id", userIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]V, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err = q.query(ctx, op, sql, []any{q.idList(ids)}, func(rows rowScanner) error {
		var id string
		var raw R
		if err := rows.Scan(&id, &raw); err != nil {
			return err
		}
		out[id] = conv(raw)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readPairs answers, for each id of a list, whether a row pairs it with one
// fixed user; sql selects the matching ids of the list given that user.
func readPairs(ctx context.Context, q querier, op, sql, one, oneName string, list []string, listName string) (map[string]bool, error) {
	if err := checkID(op, oneName, one); err != nil {
		return nil, err
	}
	ids, err := uniqueIDs(op, listName, list)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	for _, id := range ids {
		out[id] = false
	}
	err = q.query(ctx, op, sql, []any{q.idList(ids), one}, func(rows rowScanner) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		out[id] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func readIsMember(ctx context.Context, q querier, sql, conversationID, userID string) (bool, error) {
	const op = "is member"
	if err := checkID(op, "conversation id", conversationID); err != nil {
		return false, err
	}
	if err := checkID(op, "user id", userID); err != nil {
		return false, err
	}
	var ok bool
	err := q.query(ctx, op, sql, []any{conversationID, userID}, func(rows rowScanner) error { return rows.Scan(&ok) })
	return ok, err
}
