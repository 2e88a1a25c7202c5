// Package migrations holds the durable store's schema as goose SQL
// migrations, embedded in the binary. The same files run on PostgreSQL and
// on SQLite: they use only portable types and statements (text, bigint,
// composite primary keys, CHECK, CREATE ... IF NOT EXISTS), and times are
// stored as bigint Unix milliseconds on both.
//
// Apply them with store.Migrate, or through OpenPostgres/OpenSQLite which
// migrate at open; `presenced migrate status` reports them with
// store.MigrationStatus.
//
// Rules for new files: name them NNNNN_what.sql with the next sequential
// version, keep every statement valid on both PostgreSQL 15 and SQLite 3,
// and never edit a file that has been released.
package migrations

import "embed"

// FS holds every migration file, at the root of the file system.
//
//go:embed *.sql
var FS embed.FS
