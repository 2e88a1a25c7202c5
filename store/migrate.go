package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/presenced/presenced/migrations"
)

// Dialect names the SQL database behind a *sql.DB given to Migrate.
type Dialect string

const (
	DialectPostgres Dialect = "postgres"
	DialectSQLite   Dialect = "sqlite"
)

// Migration is one schema migration and whether the database has it.
type Migration struct {
	Version   int64
	Name      string    // file name in migrations/, e.g. "00001_initial_schema.sql"
	Applied   bool      // false: pending
	AppliedAt time.Time // UTC; zero when pending (in Migrate's result: when it finished)
}

// migrateLockWait is how long a node waits for another node's migration to
// finish before giving up (PostgreSQL only), polling every second.
const migrateLockWait = 5 * time.Minute

// Migrate applies every pending migration of migrations.FS to db and
// returns those it applied (none when the schema is current). It is
// idempotent. On PostgreSQL it holds a session-level advisory lock while it
// works, so several nodes starting at once apply each migration exactly
// once; the others wait, then find nothing to do. db must be a
// database/sql handle for dialect (pgx's stdlib driver, or modernc.org/sqlite).
//
// OpenPostgres and OpenSQLite call it unless told not to.
func Migrate(ctx context.Context, db *sql.DB, dialect Dialect) ([]Migration, error) {
	applied, err := runGoose(ctx, db, dialect, "migrate", (*goose.Provider).Up, func(r *goose.MigrationResult) Migration {
		return Migration{
			Version:   r.Source.Version,
			Name:      path.Base(r.Source.Path),
			Applied:   true,
			AppliedAt: time.Now().UTC(),
		}
	})
	if err != nil {
		return nil, err
	}
	return applied, checkSchema(ctx, db)
}

// schemaColumns are the columns presenced reads and writes, by table.
var schemaColumns = [][2]string{
	{"last_seen", "user_id, seen_at"},
	{"privacy", "user_id, last_seen"},
	{"contacts", "owner_id, contact_id"},
	{"conversation_members", "conversation_id, user_id"},
	{"online_users", "user_id"},
	{"node_alive", "id, seen_at"},
}

// checkSchema makes sure each table has presenced's columns. The
// migrations create a table only if none of its name exists (IF NOT
// EXISTS), so a database of another application with a table of one of
// those names (PRESENCE_DATA pointing at its file) migrated "cleanly" and
// then failed every request on that table with an internal error.
func checkSchema(ctx context.Context, db *sql.DB) error {
	for _, tc := range schemaColumns {
		rows, err := db.QueryContext(ctx, "SELECT "+tc[1]+" FROM "+tc[0]+" LIMIT 0")
		if err == nil {
			err = rows.Close()
		}
		if err != nil {
			return fmt.Errorf("store: the database's table %s is not presenced's (another application's database?): want columns %s: %w", tc[0], tc[1], err)
		}
	}
	return nil
}

// MigrationStatus lists every migration of migrations.FS in version order,
// with whether db has it applied (for `presenced migrate status`). It
// creates goose's version table if the database has none yet, and waits
// for a migration running on another node (PostgreSQL).
//
// A database whose schema is newer than this release knows (a version a
// later release applied) gets one more entry, that version, named
// UnknownMigration.
func MigrationStatus(ctx context.Context, db *sql.DB, dialect Dialect) ([]Migration, error) {
	all, err := runGoose(ctx, db, dialect, "migration status", (*goose.Provider).Status, func(s *goose.MigrationStatus) Migration {
		m := Migration{
			Version: s.Source.Version,
			Name:    path.Base(s.Source.Path),
			Applied: s.State == goose.StateApplied,
		}
		if m.Applied {
			m.AppliedAt = s.AppliedAt.UTC()
		}
		return m
	})
	if err != nil {
		return nil, err
	}
	if v, err := SchemaAhead(ctx, db, dialect); err != nil {
		return nil, err
	} else if v > 0 {
		all = append(all, Migration{Version: v, Name: UnknownMigration, Applied: true})
	}
	return all, nil
}

// UnknownMigration names a version applied by a later release.
const UnknownMigration = "(applied by a later release; unknown to this one)"

// SchemaAhead returns the database's schema version if a later release
// applied it (one this release has no migration of), else 0. This release
// then runs on a schema it does not know (a rollback): the open logs it.
func SchemaAhead(ctx context.Context, db *sql.DB, dialect Dialect) (int64, error) {
	p, err := newProvider(db, dialect)
	if err != nil {
		return 0, err
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return 0, wrap("schema version", err, driverTransient(dialect))
	}
	if current > target {
		return current, nil
	}
	return 0, nil
}

// warnAhead logs, on logger (nil: nowhere), a schema newer than this
// release knows.
func warnAhead(ctx context.Context, logger *slog.Logger, db *sql.DB, dialect Dialect) {
	if logger == nil {
		return
	}
	if v, err := SchemaAhead(ctx, db, dialect); err == nil && v > 0 {
		logger.Warn("the database's schema is newer than this release knows (a later release migrated it): running on it as it is", "schema_version", v)
	}
}

// runGoose runs do (a goose.Provider method) on a provider for db, its error
// wrapped as op, and returns its results converted by conv.
func runGoose[R any](ctx context.Context, db *sql.DB, dialect Dialect, op string,
	do func(*goose.Provider, context.Context) ([]R, error), conv func(R) Migration,
) ([]Migration, error) {
	p, err := newProvider(db, dialect)
	if err != nil {
		return nil, err
	}
	results, err := do(p, ctx)
	if err != nil {
		return nil, wrap(op, err, driverTransient(dialect))
	}
	out := make([]Migration, 0, len(results))
	for _, r := range results {
		out = append(out, conv(r))
	}
	return out, nil
}

func newProvider(db *sql.DB, dialect Dialect) (*goose.Provider, error) {
	opts := []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	}
	var gd goose.Dialect
	switch dialect {
	case DialectPostgres:
		gd = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker(
			lock.WithLockTimeout(1, uint64(migrateLockWait/time.Second)),
			lock.WithUnlockTimeout(1, 60),
		)
		if err != nil {
			return nil, fmt.Errorf("store: migrate: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case DialectSQLite:
		gd = goose.DialectSQLite3
	default:
		return nil, invalid("migrate", "unknown dialect %q", dialect)
	}
	p, err := goose.NewProvider(gd, db, migrations.FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	return p, nil
}

func driverTransient(d Dialect) func(error) bool {
	if d == DialectPostgres {
		return pgTransient
	}
	return sqliteTransient
}

// logApplied reports applied migrations on logger (nil: nowhere).
func logApplied(logger *slog.Logger, applied []Migration) {
	if logger == nil {
		return
	}
	for _, m := range applied {
		logger.Info("migration applied", "version", m.Version, "name", m.Name)
	}
}
