package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite"

	"github.com/presenced/presenced/migrations"
)

var nameRE = regexp.MustCompile(`^(\d{5})_[a-z0-9_]+\.sql$`)

// TestFiles checks the naming and annotations rules of the package doc.
func TestFiles(t *testing.T) {
	names, err := fs.Glob(migrations.FS, "*")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no migration embedded")
	}
	slices.Sort(names)
	for i, name := range names {
		m := nameRE.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("%s: want NNNNN_snake_case.sql", name)
			continue
		}
		if want := fmt.Sprintf("%05d", i+1); m[1] != want {
			t.Errorf("%s: version %s, want %s (sequential, no gaps)", name, m[1], want)
		}
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if !strings.Contains(src, "-- +goose Up\n") || !strings.Contains(src, "-- +goose Down\n") {
			t.Errorf("%s: want both -- +goose Up and -- +goose Down sections", name)
		}
	}
}

// TestUpDownUp runs every migration up, all the way down and up again on
// SQLite (the PostgreSQL path is exercised by the store tests).
func TestUpDownUp(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations.FS, goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tables := func() []string {
		rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' AND name <> 'goose_db_version' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"contacts", "conversation_members", "conversation_members_user_id_idx", "last_seen", "node_alive", "online_users", "privacy"}
	if got := tables(); !slices.Equal(got, want) {
		t.Fatalf("after up: %v, want %v", got, want)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := tables(); len(got) != 0 {
		t.Fatalf("after down: %v left", got)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tables(); !slices.Equal(got, want) {
		t.Fatalf("after up again: %v, want %v", got, want)
	}
}
