package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/ids"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLiteConfig tunes OpenSQLite. Zero values mean the defaults.
type SQLiteConfig struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection or process; 0 means 5s.
	BusyTimeout time.Duration
	// MaxReaders caps the read connections; 0 means the larger of 4 and
	// the number of CPUs. Writes always go through one connection.
	MaxReaders int
	// SkipMigrate opens without applying migrations.
	SkipMigrate bool
	// Logger receives one line per migration applied at open; nil: none.
	Logger *slog.Logger
	// Exclusive: one process at a time (the server's). The file is locked
	// until Close, and an open while another process holds the lock fails
	// with ErrInUse. Two servers on one file would each keep presence of
	// their own and both write last-seen. Without it (migrate) the open
	// neither takes nor checks the lock.
	Exclusive bool
}

// ErrInUse: another process holds the embedded store open exclusively.
var ErrInUse = errors.New("the file is in use by another presenced process (one server per PRESENCE_DATA file)")

// SQLite is the embedded single-node store: one SQLite file in WAL mode
// (modernc.org/sqlite, no cgo). Writes are serialised on one connection,
// reads use a pool of read-only connections. It is safe for concurrent use.
type SQLite struct {
	reader
	w, r    *sql.DB // writer (one connection) and readers; the same for ":memory:"
	path    string
	closed  atomic.Bool
	counter counters
	lock    *os.File // held while open (SQLiteConfig.Exclusive)
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens (creating it and its directory if needed) the database
// file at path and applies pending migrations unless cfg.SkipMigrate.
// path ":memory:" gives a private in-memory database on one connection.
func OpenSQLite(ctx context.Context, path string, cfg SQLiteConfig) (*SQLite, error) {
	const op = "open sqlite"
	if path == "" || strings.ContainsAny(path, "?\x00") || strings.HasPrefix(path, "file:") {
		return nil, invalid(op, "database path %q: want a plain file name without '?'", ids.Clip(path))
	}
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	common := "_pragma=busy_timeout(" + strconv.FormatInt(busy.Milliseconds(), 10) + ")" +
		"&_pragma=foreign_keys(0)"
	s := &SQLite{path: path}
	s.reader = reader{s, liteReads}
	opened := false
	defer func() {
		if !opened && s.lock != nil {
			_ = s.lock.Close() // (releases the lock)
		}
	}()
	if path == ":memory:" {
		db, err := sql.Open("sqlite", path+"?"+common+"&_txlock=immediate")
		if err != nil {
			return nil, wrap(op, err, s.transient)
		}
		db.SetMaxOpenConns(1)
		db.SetConnMaxIdleTime(0)
		db.SetConnMaxLifetime(0)
		s.w, s.r = db, db
	} else {
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, wrap(op, err, s.transient)
			}
		}
		// a new file is its owner's alone (SQLite makes its -wal and -shm
		// files with the database's mode): it holds privacy settings,
		// contacts, members and last-seen times
		if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			_ = f.Close()
		}
		if cfg.Exclusive {
			lock, err := lockFile(path)
			if err != nil {
				return nil, fmt.Errorf("store: %s: %w", path, err)
			}
			s.lock = lock
		}
		w, err := sql.Open("sqlite", path+"?"+common+
			"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
		if err != nil {
			return nil, wrap(op, err, s.transient)
		}
		w.SetMaxOpenConns(1)
		w.SetConnMaxIdleTime(0)
		w.SetConnMaxLifetime(0)
		r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
		if err != nil {
			w.Close()
			return nil, wrap(op, err, s.transient)
		}
		n := cfg.MaxReaders
		if n <= 0 {
			n = max(4, runtime.NumCPU())
		}
		r.SetMaxOpenConns(n)
		r.SetMaxIdleConns(n)
		s.w, s.r = w, r
	}
	// The writer connects first and switches the file to WAL; readers
	// connect lazily, after it.
	if err := s.connectWriter(ctx, busy); err != nil {
		_ = s.closeDBs() // the ping failed; that error is the one to report
		return nil, wrap(op, err, s.transient)
	}
	if !cfg.SkipMigrate {
		applied, err := s.Migrate(ctx)
		if err != nil {
			_ = s.closeDBs() // the migration failed; that error is the one to report
			return nil, err
		}
		logApplied(cfg.Logger, applied)
		warnAhead(ctx, cfg.Logger, s.w, DialectSQLite)
	}
	opened = true
	return s, nil
}

// connectWriter connects the writer, retrying within the busy timeout
// while the file is busy: two processes opening a new file at once both
// switch it to WAL, and SQLite answers that switch SQLITE_BUSY at once,
// without its busy handler, when another connection holds the lock it
// needs (seen in the store suite's ConcurrentOpen, about 1 run in 20).
func (s *SQLite) connectWriter(ctx context.Context, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	for {
		err := s.w.PingContext(ctx)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sqliteMigrateLocks serialises migrations of one file within the process:
// goose has no SQLite lock, and two racing migrators would both try to
// apply the same version.
var sqliteMigrateLocks sync.Map // absolute path -> *sync.Mutex

func (s *SQLite) migrateLock() func() {
	if s.path == ":memory:" {
		return func() {}
	}
	key, err := filepath.Abs(s.path)
	if err != nil {
		key = s.path
	}
	mu, _ := sqliteMigrateLocks.LoadOrStore(key, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// Migrate applies pending migrations (see the package function Migrate).
func (s *SQLite) Migrate(ctx context.Context) ([]Migration, error) {
	if s.closed.Load() {
		return nil, wrap("migrate", errClosed, s.transient)
	}
	defer s.migrateLock()()
	return Migrate(ctx, s.w, DialectSQLite)
}

// MigrationStatus lists the migrations and whether each is applied.
func (s *SQLite) MigrationStatus(ctx context.Context) ([]Migration, error) {
	if s.closed.Load() {
		return nil, wrap("migration status", errClosed, s.transient)
	}
	defer s.migrateLock()()
	return MigrationStatus(ctx, s.w, DialectSQLite)
}

// Stats returns the statement counters.
func (s *SQLite) Stats() Stats { return s.counter.snapshot() }

func (s *SQLite) check(op string) error {
	if s.closed.Load() {
		return wrap(op, errClosed, s.transient)
	}
	return nil
}

type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (s *SQLite) exec(ctx context.Context, q sqlExecer, query string, args ...any) error {
	s.counter.statements.Add(1)
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil {
		s.counter.rows.Add(n)
	}
	return nil
}

// jsonIDs encodes validated ids as a JSON array for json_each. Valid ids
// hold no character that JSON would escape.
func jsonIDs(ids []string) string {
	return jsonArray(len(ids), 16, func(b *strings.Builder, i int) {
		b.WriteByte('"')
		b.WriteString(ids[i])
		b.WriteByte('"')
	})
}

// jsonArray writes a JSON array of n elements, each written by elem;
// sizeHint is the expected bytes per element.
func jsonArray(n, sizeHint int, elem func(b *strings.Builder, i int)) string {
	var b strings.Builder
	b.Grow(n * sizeHint)
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		elem(&b, i)
	}
	b.WriteByte(']')
	return b.String()
}

// The "WHERE true" resolves SQLite's parsing ambiguity between a join's ON
// and the upsert's ON CONFLICT.
const sqliteUpsertLastSeen = `INSERT INTO last_seen (user_id, seen_at)
SELECT value ->> 0, value ->> 1 FROM json_each(?) WHERE true
ON CONFLICT (user_id) DO UPDATE SET seen_at = max(last_seen.seen_at, excluded.seen_at)
WHERE last_seen.seen_at < excluded.seen_at`

// UpsertLastSeen implements Store: one INSERT ... ON CONFLICT over a JSON
// array of [user id, Unix ms] pairs.
func (s *SQLite) UpsertLastSeen(ctx context.Context, batch []LastSeen) error {
	const op = "upsert last seen"
	ids, ms, err := lastSeenRows(op, batch)
	if err != nil || len(ids) == 0 {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	rows := jsonArray(len(ids), 32, func(b *strings.Builder, i int) {
		b.WriteString(`["`)
		b.WriteString(ids[i])
		b.WriteString(`",`)
		b.WriteString(strconv.FormatInt(ms[i], 10))
		b.WriteByte(']')
	})
	return wrap(op, s.exec(ctx, s.w, sqliteUpsertLastSeen, rows), s.transient)
}

// SetPrivacy implements Store.
func (s *SQLite) SetPrivacy(ctx context.Context, userID string, v Visibility) error {
	const op = "set privacy"
	if err := privacyArgs(op, userID, v); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	return wrap(op, s.exec(ctx, s.w, `INSERT INTO privacy (user_id, last_seen) VALUES (?, ?)
ON CONFLICT (user_id) DO UPDATE SET last_seen = excluded.last_seen
WHERE privacy.last_seen <> excluded.last_seen`, userID, string(v)), s.transient)
}

// SetContacts implements Store: in one transaction, delete the contacts
// not in the new list and insert the missing ones.
func (s *SQLite) SetContacts(ctx context.Context, userID string, contacts []string) error {
	const op = "set contacts"
	ids, err := replaceArgs(op, "user id", userID, "contact id", contacts)
	if err != nil {
		return err
	}
	_, err = s.replace(ctx, op, userID, ids,
		`DELETE FROM contacts WHERE owner_id = ?1 AND contact_id NOT IN (SELECT value FROM json_each(?2))`,
		`INSERT INTO contacts (owner_id, contact_id) SELECT ?1, value FROM json_each(?2) WHERE true ON CONFLICT DO NOTHING`)
	return err
}

// SetMembers implements Store, like SetContacts; the deleted rows are the
// removed members.
func (s *SQLite) SetMembers(ctx context.Context, conversationID string, userIDs []string) ([]string, error) {
	const op = "set members"
	ids, err := replaceArgs(op, "conversation id", conversationID, "user id", userIDs)
	if err != nil {
		return nil, err
	}
	return s.replace(ctx, op, conversationID, ids,
		`DELETE FROM conversation_members WHERE conversation_id = ?1 AND user_id NOT IN (SELECT value FROM json_each(?2)) RETURNING user_id`,
		`INSERT INTO conversation_members (conversation_id, user_id) SELECT ?1, value FROM json_each(?2) WHERE true ON CONFLICT DO NOTHING`)
}

// replace runs del (which may return the deleted ids) then ins, both with
// (?1 key, ?2 ids as JSON), in one IMMEDIATE transaction on the writer.
func (s *SQLite) replace(ctx context.Context, op, key string, ids []string, del, ins string) (removed []string, err error) {
	if err := s.check(op); err != nil {
		return nil, err
	}
	arr := jsonIDs(ids)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		s.counter.statements.Add(1)
		rows, err := tx.QueryContext(ctx, del, key, arr)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			removed = append(removed, id)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		s.counter.rows.Add(int64(len(removed)))
		return s.exec(ctx, tx, ins, key, arr)
	})
	if err != nil {
		return nil, wrap(op, err, s.transient)
	}
	slices.Sort(removed)
	if removed == nil {
		removed = []string{}
	}
	return removed, nil
}

// liteReads are the read statements on SQLite; a list travels as a JSON
// array read with json_each.
var liteReads = readSQL{
	lastSeen:      `SELECT user_id, seen_at FROM last_seen WHERE user_id IN (SELECT value FROM json_each(?1))`,
	privacy:       `SELECT user_id, last_seen FROM privacy WHERE user_id IN (SELECT value FROM json_each(?1))`,
	contactOf:     `SELECT owner_id FROM contacts WHERE contact_id = ?2 AND owner_id IN (SELECT value FROM json_each(?1))`,
	contactsAmong: `SELECT contact_id FROM contacts WHERE owner_id = ?2 AND contact_id IN (SELECT value FROM json_each(?1))`,
	isMember:      `SELECT EXISTS (SELECT 1 FROM conversation_members WHERE conversation_id = ?1 AND user_id = ?2)`,
}

// idList implements querier.
func (s *SQLite) idList(ids []string) any { return jsonIDs(ids) }

// query runs one read query on the readers and calls scan for each row.
func (s *SQLite) query(ctx context.Context, op, query string, args []any, scan func(rowScanner) error) error {
	if err := s.check(op); err != nil {
		return err
	}
	s.counter.queries.Add(1)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return wrap(op, err, s.transient)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return wrap(op, err, s.transient)
		}
	}
	return wrap(op, rows.Err(), s.transient)
}

// Ping implements Store: both the writer and a reader answer.
func (s *SQLite) Ping(ctx context.Context) error {
	const op = "ping"
	if err := s.check(op); err != nil {
		return err
	}
	// The writer connects first and switches the file to WAL; readers
	// connect lazily, after it.
	if err := s.w.PingContext(ctx); err != nil {
		return wrap(op, err, s.transient)
	}
	return wrap(op, s.r.PingContext(ctx), s.transient)
}

// Close implements Store. Later calls return ErrUnavailable; closing twice
// is harmless.
func (s *SQLite) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := s.closeDBs()
	if s.lock != nil {
		_ = s.lock.Close() // after the databases: the next server may open it now
	}
	if err != nil {
		return fmt.Errorf("store: close sqlite: %w", err)
	}
	return nil
}

func (s *SQLite) closeDBs() error {
	var errs []error
	if s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

// transient is sqliteTransient, plus any failure after Close (database/sql
// then reports an unexported "database is closed").
func (s *SQLite) transient(err error) bool { return s.closed.Load() || sqliteTransient(err) }

// sqliteTransient reports whether err means the file could not be used
// now: locked or busy past the busy timeout, out of memory or disk, or an
// I/O failure.
func sqliteTransient(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
			sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
			return true
		}
	}
	var pe *os.PathError
	return errors.As(err, &pe)
}

var _ OnlineKeeper = (*SQLite)(nil)

// KeepOnline implements OnlineKeeper: one IMMEDIATE transaction.
func (s *SQLite) KeepOnline(ctx context.Context, alive time.Time, online, offline []string) error {
	const op = "keep online"
	on, off, ms, err := onlineArgs(op, alive, online, offline)
	if err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	return wrap(op, s.inTx(ctx, func(tx *sql.Tx) error {
		if ms != 0 {
			if err := s.exec(ctx, tx, `INSERT INTO node_alive (id, seen_at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at`, ms); err != nil {
				return err
			}
		}
		if len(on) > 0 {
			if err := s.exec(ctx, tx, `INSERT INTO online_users (user_id) SELECT value FROM json_each(?) WHERE true ON CONFLICT DO NOTHING`, jsonIDs(on)); err != nil {
				return err
			}
		}
		if len(off) > 0 {
			return s.exec(ctx, tx, `DELETE FROM online_users WHERE user_id IN (SELECT value FROM json_each(?))`, jsonIDs(off))
		}
		return nil
	}), s.transient)
}

// RecoverOnline implements OnlineKeeper: one IMMEDIATE transaction.
func (s *SQLite) RecoverOnline(ctx context.Context) (int, error) {
	const op = "recover online"
	if err := s.check(op); err != nil {
		return 0, err
	}
	var n int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM online_users`).Scan(&n); err != nil || n == 0 {
			return err
		}
		if err := s.exec(ctx, tx, `INSERT INTO last_seen (user_id, seen_at)
SELECT o.user_id, a.seen_at FROM online_users o JOIN node_alive a ON a.id = 1 WHERE true
ON CONFLICT (user_id) DO UPDATE SET seen_at = max(last_seen.seen_at, excluded.seen_at)
WHERE last_seen.seen_at < excluded.seen_at`); err != nil {
			return err
		}
		return s.exec(ctx, tx, `DELETE FROM online_users`)
	})
	return n, wrap(op, err, s.transient)
}

// inTx runs fn in one IMMEDIATE transaction on the writer.
func (s *SQLite) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit: ErrTxDone
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
