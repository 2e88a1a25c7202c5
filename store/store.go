// Package store holds the durable data: last-seen times, privacy settings,
// contacts and conversation membership. Two implementations share one
// contract and one test suite: PostgreSQL through pgx (cluster mode), and an
// embedded SQLite file (single node, zero setup). Schema changes live in
// migrations/ and are applied by Migrate.
package store

import (
	"context"
	"errors"
	"time"
)

// Visibility is a user's last-seen privacy setting (CONTRACT §3).
type Visibility string

const (
	Everyone Visibility = "everyone"
	Contacts Visibility = "contacts"
	Nobody   Visibility = "nobody"
)

// Valid reports whether v is one of the three settings.
func (v Visibility) Valid() bool { return v == Everyone || v == Contacts || v == Nobody }

// DefaultVisibility applies to users who never chose one.
const DefaultVisibility = Everyone

// Errors translated from the drivers, so callers never import them.
var (
	ErrUnavailable = errors.New("store: unavailable")
	ErrInvalid     = errors.New("store: invalid argument")
)

// LastSeen is one user's last-seen time.
type LastSeen struct {
	UserID string
	At     time.Time
}

// Store is the durable data of the whole cluster.
type Store interface {
	// UpsertLastSeen writes many users' last-seen times in ONE statement;
	// a stored time never moves backwards (the later of old and new wins).
	// Duplicate user ids in one call are allowed (the latest wins).
	UpsertLastSeen(ctx context.Context, batch []LastSeen) error
	// LastSeen reads the stored times of userIDs in one query; users never
	// seen are absent from the map.
	LastSeen(ctx context.Context, userIDs []string) (map[string]time.Time, error)

	// Privacy returns the settings of userIDs in one query; users without a
	// row get DefaultVisibility.
	Privacy(ctx context.Context, userIDs []string) (map[string]Visibility, error)
	SetPrivacy(ctx context.Context, userID string, v Visibility) error

	// SetContacts replaces userID's contact list (idempotent).
	SetContacts(ctx context.Context, userID string, contacts []string) error
	// ContactOf returns, for each owner in owners, whether viewer is in the
	// owner's contact list, in one query.
	ContactOf(ctx context.Context, owners []string, viewer string) (map[string]bool, error)
	// ContactsAmong returns, for each candidate, whether it is in owner's
	// contact list, in one query (one user's change told to many viewers).
	ContactsAmong(ctx context.Context, owner string, candidates []string) (map[string]bool, error)

	// SetMembers replaces a conversation's member list (idempotent) and
	// returns the users removed by this change.
	SetMembers(ctx context.Context, conversationID string, userIDs []string) (removed []string, err error)
	// IsMember reports whether userID is a member of conversationID.
	IsMember(ctx context.Context, conversationID, userID string) (bool, error)

	// Ping checks the store is reachable (readiness).
	Ping(ctx context.Context) error
	Close() error
}
