package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgresURL is the CI database (trust auth on the loopback).
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var (
	pgOnce     sync.Once
	pgURL      string
	pgErr      error
	pgExplicit bool
)

// PostgresAdmin returns the URL of a PostgreSQL server for tests, from
// DATABASE_TEST_URL or else DefaultPostgresURL. An unreachable server skips
// the test, unless DATABASE_TEST_URL is set or CI=true: then it fails.
func PostgresAdmin(tb testing.TB) string {
	tb.Helper()
	pgOnce.Do(func() {
		pgURL = os.Getenv("DATABASE_TEST_URL")
		pgExplicit = pgURL != ""
		if !pgExplicit {
			pgURL = DefaultPostgresURL
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			pgErr = err
			return
		}
		pgErr = conn.Ping(ctx)
		conn.Close(ctx)
	})
	if pgErr != nil {
		if pgExplicit || os.Getenv("CI") == "true" {
			tb.Fatalf("PostgreSQL unreachable at DATABASE_TEST_URL or the default (required under CI=true): %v", pgErr)
		}
		tb.Skipf("PostgreSQL unreachable (set DATABASE_TEST_URL): %v", pgErr)
	}
	return pgURL
}

// FreshPostgres creates a database named prefix_<random>, dropped when tb
// ends, and returns its URL.
func FreshPostgres(tb testing.TB, prefix string) string {
	tb.Helper()
	admin := PostgresAdmin(tb)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE DATABASE " + name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			tb.Errorf("drop %s: %v", name, err)
		}
	})
	return WithDatabase(tb, admin, name)
}

// WithDatabase returns admin's URL pointed at database name.
func WithDatabase(tb testing.TB, admin, name string) string {
	tb.Helper()
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		u, err := url.Parse(admin)
		if err != nil {
			tb.Fatal(err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String()
	}
	return admin + " dbname=" + name // key=value form: the last one wins
}
