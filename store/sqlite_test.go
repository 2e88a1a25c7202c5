package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/store/storetest"
)

var sqliteBackend = storetest.Backend{
	NewDatabase: func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "data", "presenced.db") },
	Open: func(ctx context.Context, path string, skipMigrate bool) (storetest.Store, error) {
		return store.OpenSQLite(ctx, path, store.SQLiteConfig{SkipMigrate: skipMigrate})
	},
}

func TestSQLite(t *testing.T) { storetest.Run(t, sqliteBackend) }

func TestSQLiteFile(t *testing.T) {
	path := sqliteBackend.NewDatabase(t)
	s, err := store.OpenSQLite(t.Context(), path, store.SQLiteConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	if err := s.UpsertLastSeen(t.Context(), []store.LastSeen{{UserID: "a", At: at}}); err != nil {
		t.Fatal(err)
	}

	// Read the file behind the store's back: WAL mode, integer milliseconds.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode, typ string
	var ms int64
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT typeof(seen_at), seen_at FROM last_seen WHERE user_id = 'a'`).Scan(&typ, &ms); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || typ != "integer" || ms != at.UnixMilli() {
		t.Errorf("journal_mode %q, seen_at %s %d; want wal, integer %d", mode, typ, ms, at.UnixMilli())
	}
	if _, err := db.Exec(`INSERT INTO privacy (user_id, last_seen) VALUES ('a', 'friends')`); err == nil {
		t.Error("the privacy CHECK constraint let 'friends' in")
	}
}

// The server's open holds the file: a second server's fails with
// ErrInUse, while a migration's (not exclusive) opens it as before; once
// the first closes, another server may open it. A new file is its
// owner's alone (0600), as are SQLite's -wal and -shm beside it.
func TestSQLiteExclusive(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "presenced.db")
	first, err := store.OpenSQLite(ctx, path, store.SQLiteConfig{Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.SetPrivacy(ctx, "alice", store.Nobody); err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenSQLite(ctx, path, store.SQLiteConfig{Exclusive: true}); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("a second server's open: %v, want ErrInUse", err)
	}
	mig, err := store.OpenSQLite(ctx, path, store.SQLiteConfig{})
	if err != nil {
		t.Fatalf("a migration's open beside the server: %v", err)
	}
	_ = mig.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", filepath.Base(f), err, fi.Mode().Perm())
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := store.OpenSQLite(ctx, path, store.SQLiteConfig{Exclusive: true})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if p, err := again.Privacy(ctx, []string{"alice"}); err != nil || p["alice"] != store.Nobody {
		t.Fatalf("alice's privacy after the reopen: %v %v", p, err)
	}
	_ = again.Close()
}

func TestSQLiteMemory(t *testing.T) {
	s, err := store.OpenSQLite(t.Context(), ":memory:", store.SQLiteConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.UpsertLastSeen(t.Context(), []store.LastSeen{{UserID: "a", At: at}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.LastSeen(t.Context(), []string{"a"})
	if err != nil || !got["a"].Equal(at) {
		t.Fatalf("LastSeen = %v, %v; want %v", got, err, at)
	}
	if _, err := s.SetMembers(t.Context(), "c", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	st, err := s.MigrationStatus(t.Context())
	if err != nil || len(st) == 0 || !st[0].Applied {
		t.Fatalf("MigrationStatus = %+v, %v", st, err)
	}
}

func TestSQLiteOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory component that is a file: the store cannot be created.
	_, err := store.OpenSQLite(t.Context(), filepath.Join(file, "sub", "x.db"), store.SQLiteConfig{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("OpenSQLite(under a file) = %v, want ErrUnavailable", err)
	}
	// A directory where the database file should be.
	_, err = store.OpenSQLite(t.Context(), dir, store.SQLiteConfig{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("OpenSQLite(a directory) = %v, want ErrUnavailable", err)
	}
	for _, p := range []string{"", "x.db?mode=ro", "file:x.db"} {
		if _, err := store.OpenSQLite(t.Context(), p, store.SQLiteConfig{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("OpenSQLite(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

// coalescedStore is a SQLite store whose LastSeen and Privacy go through
// store.Coalesced: the wrapper must pass the same suite.
type coalescedStore struct {
	storetest.Store
	c store.Store
}

func (s coalescedStore) LastSeen(ctx context.Context, userIDs []string) (map[string]time.Time, error) {
	return s.c.LastSeen(ctx, userIDs)
}

func (s coalescedStore) Privacy(ctx context.Context, userIDs []string) (map[string]store.Visibility, error) {
	return s.c.Privacy(ctx, userIDs)
}

func TestCoalescedSQLite(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		NewDatabase: sqliteBackend.NewDatabase,
		Open: func(ctx context.Context, path string, skipMigrate bool) (storetest.Store, error) {
			s, err := sqliteBackend.Open(ctx, path, skipMigrate)
			if err != nil {
				return nil, err
			}
			return coalescedStore{Store: s, c: store.Coalesced(s)}, nil
		},
	})
}

// TestCoalescedConcurrentReads: callers whose reads are shared each get
// their own users' values, and a caller with a bad id fails alone.
func TestCoalescedConcurrentReads(t *testing.T) {
	base := storetest.MustOpen(t, sqliteBackend)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var batch []store.LastSeen
	for i := range 100 {
		batch = append(batch, store.LastSeen{UserID: fmt.Sprint("u", i), At: at.Add(time.Duration(i) * time.Second)})
	}
	if err := base.UpsertLastSeen(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if err := base.SetPrivacy(t.Context(), "u7", store.Nobody); err != nil {
		t.Fatal(err)
	}
	s := store.Coalesced(base)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 100 {
		wg.Go(func() {
			own, never := fmt.Sprint("u", i), fmt.Sprint("never", i)
			got, err := s.LastSeen(t.Context(), []string{own, never})
			switch {
			case err != nil:
				errs <- err
			case len(got) != 1 || !got[own].Equal(at.Add(time.Duration(i)*time.Second)):
				errs <- fmt.Errorf("LastSeen(%s, %s) = %v", own, never, got)
			}
			vs, err := s.Privacy(t.Context(), []string{own})
			want := store.DefaultVisibility
			if i == 7 {
				want = store.Nobody
			}
			switch {
			case err != nil:
				errs <- err
			case len(vs) != 1 || vs[own] != want:
				errs <- fmt.Errorf("Privacy(%s) = %v, want %s", own, vs, want)
			}
			if i%10 == 0 {
				if _, err := s.LastSeen(t.Context(), []string{own, "bad id"}); !errors.Is(err, store.ErrInvalid) {
					errs <- fmt.Errorf("a bad id: err = %v, want ErrInvalid", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A database of another application with a table of one of presenced's
// names (but other columns) is refused at open, naming the table, instead
// of failing every request on it later.
func TestSQLiteForeignTable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE privacy (id integer PRIMARY KEY, level text)`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	_, err = store.OpenSQLite(ctx, path, store.SQLiteConfig{})
	if err == nil || !strings.Contains(err.Error(), "table privacy is not presenced's") {
		t.Fatalf("open of another application's database: %v", err)
	}
}

// A schema version applied by a later release is listed by the status (as
// UnknownMigration) and logged at open; the open goes on.
func TestSQLiteSchemaAhead(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := store.OpenSQLite(ctx, path, store.SQLiteConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	var logs strings.Builder
	s, err = store.OpenSQLite(ctx, path, store.SQLiteConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.Contains(logs.String(), "schema_version=99") {
		t.Errorf("open log: %q", logs.String())
	}
	all, err := s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last := all[len(all)-1]; last.Version != 99 || last.Name != store.UnknownMigration || !last.Applied {
		t.Errorf("status ends with %+v, want version 99 unknown and applied", last)
	}
}
