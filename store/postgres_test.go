package store_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/store/storetest"
)

func pgAdmin(tb testing.TB) string { tb.Helper(); return storetest.PostgresAdmin(tb) }

func newPGDatabase(tb testing.TB) string {
	tb.Helper()
	return storetest.FreshPostgres(tb, "presenced_test")
}

var postgresBackend = storetest.Backend{
	NewDatabase: newPGDatabase,
	Open: func(ctx context.Context, url string, skipMigrate bool) (storetest.Store, error) {
		return store.OpenPostgres(ctx, url, store.PostgresConfig{SkipMigrate: skipMigrate})
	},
}

func TestPostgres(t *testing.T) {
	pgAdmin(t)
	storetest.Run(t, postgresBackend)
}

func TestPostgresUnreachable(t *testing.T) {
	start := time.Now()
	_, err := store.OpenPostgres(t.Context(), "postgres://postgres:s3cret@127.0.0.1:1/test?sslmode=disable",
		store.PostgresConfig{ConnectTimeout: time.Second})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("OpenPostgres(port 1) = %v, want ErrUnavailable", err)
	}
	t.Logf("port 1: %v", err)
	var ne net.Error
	if !errors.As(err, &ne) {
		t.Errorf("the network error is not in the chain of %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing took %v", d)
	}

	// A server that never answers: the connect timeout bounds the wait.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start = time.Now()
	_, err = store.OpenPostgres(t.Context(), "postgres://postgres@"+ln.Addr().String()+"/test?sslmode=disable",
		store.PostgresConfig{ConnectTimeout: 300 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("OpenPostgres(silent server) = %v, want ErrUnavailable", err)
	}
	t.Logf("silent server: %v", err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing took %v", d)
	}

	_, err = store.OpenPostgres(t.Context(), "postgres://user:s3cret@host:notaport/db", store.PostgresConfig{})
	if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("OpenPostgres(malformed URL) = %v, want ErrInvalid without the password", err)
	}
}

// A fresh store keeps connections open before any read: defaultMinConns,
// at most the pool's maximum, or the URL's pool_min_conns.
func TestPostgresPoolWarm(t *testing.T) {
	dbURL := newPGDatabase(t)
	for _, c := range []struct {
		name string
		url  string
		cfg  store.PostgresConfig
		want int32
	}{
		{"default", dbURL, store.PostgresConfig{}, 4},
		{"capped by MaxConns", dbURL, store.PostgresConfig{MaxConns: 2}, 2},
		{"pool_min_conns in the URL", dbURL + sep(dbURL) + "pool_max_conns=8&pool_min_conns=6", store.PostgresConfig{}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.OpenPostgres(t.Context(), c.url, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			deadline := time.Now().Add(5 * time.Second)
			for store.PoolConns(s) < c.want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := store.PoolConns(s); got < c.want {
				t.Fatalf("%d connections open, want at least %d", got, c.want)
			}
			if c.cfg.MaxConns > 0 && store.PoolConns(s) > c.cfg.MaxConns {
				t.Fatalf("%d connections open, over MaxConns %d", store.PoolConns(s), c.cfg.MaxConns)
			}
		})
	}
}

// sep is what joins a query parameter to url.
func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

// TestPostgresServerGone checks that a store whose database disappears
// reports ErrUnavailable, then recovers by itself.
func TestPostgresServerGone(t *testing.T) {
	admin := pgAdmin(t)
	dbURL := newPGDatabase(t)
	s, err := store.OpenPostgres(t.Context(), dbURL, store.PostgresConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Refuse new connections to the database and end the existing ones.
	conn, err := pgx.Connect(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	name := strings.TrimPrefix(must(url.Parse(dbURL)).Path, "/")
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("ALTER DATABASE " + name + " ALLOW_CONNECTIONS false")
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + name + "'")
	var failed error
	for range 3 { // pooled connections may notice one at a time
		if _, failed = s.LastSeen(t.Context(), []string{"a"}); failed != nil {
			break
		}
	}
	t.Logf("database gone: %v", failed)
	if !errors.Is(failed, store.ErrUnavailable) {
		t.Errorf("LastSeen with the database gone = %v, want ErrUnavailable", failed)
	}
	exec("ALTER DATABASE " + name + " ALLOW_CONNECTIONS true")
	// The pool keeps a few connections open (defaultMinConns), all ended
	// above. One idle for over a second is pinged before use and replaced
	// if dead (pgxpool's default), as any would be after a real outage.
	time.Sleep(1100 * time.Millisecond)
	if _, err := s.LastSeen(t.Context(), []string{"a"}); err != nil {
		t.Errorf("LastSeen after the database came back = %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestPostgresSchema checks the table shapes operators rely on.
func TestPostgresSchema(t *testing.T) {
	dbURL := newPGDatabase(t)
	s, err := store.OpenPostgres(t.Context(), dbURL, store.PostgresConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), `SELECT table_name || '.' || column_name || ' ' || data_type
FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'
ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"contacts.owner_id text", "contacts.contact_id text",
		"conversation_members.conversation_id text", "conversation_members.user_id text",
		"last_seen.user_id text", "last_seen.seen_at bigint",
		"node_alive.id integer", "node_alive.seen_at bigint",
		"online_users.user_id text",
		"privacy.user_id text", "privacy.last_seen text",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("columns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var idx int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_indexes WHERE indexname = 'conversation_members_user_id_idx'`).Scan(&idx); err != nil || idx != 1 {
		t.Errorf("index on conversation_members(user_id): %d, %v", idx, err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO privacy VALUES ('a', 'friends')`); err == nil {
		t.Error("the privacy CHECK constraint let 'friends' in")
	}
}
