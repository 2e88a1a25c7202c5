package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jackc/puddle/v2"
)

// PostgresConfig tunes OpenPostgres. Zero values mean the defaults.
type PostgresConfig struct {
	// MaxConns caps the connection pool; 0 keeps pool_max_conns from the
	// URL, else pgx's default (the larger of 4 and the number of CPUs).
	// The pool keeps pool_min_conns (the URL) or defaultMinConns
	// connections open, at most MaxConns.
	MaxConns int32
	// ConnectTimeout bounds each connection attempt; 0 keeps
	// connect_timeout from the URL, else 5s.
	ConnectTimeout time.Duration
	// SkipMigrate opens without applying migrations (for
	// `presenced migrate status`, or when migrations run as a separate step).
	SkipMigrate bool
	// Logger receives one line per migration applied at open; nil: none.
	Logger *slog.Logger
}

// Postgres is the cluster store: PostgreSQL through a pgx connection pool.
// It is safe for concurrent use.
type Postgres struct {
	reader
	pool    *pgxpool.Pool
	conn    pgx.ConnConfig // for the migrator's own connection
	closed  atomic.Bool
	counter counters
}

var _ Store = (*Postgres)(nil)

const defaultConnectTimeout = 5 * time.Second

// defaultMinConns connections are kept open from the start (unless the URL
// sets pool_min_conns): a burst of reads after a quiet start would
// otherwise wait for new connections. 1,000 presence:subscribe (100 in
// flight) on two fresh nodes: ack p99 150–250 ms with a cold pool,
// 63–99 ms with a warm one.
const defaultMinConns = 4

// CheckPostgresURL reports, without connecting, why url is not a database
// URL OpenPostgres can use (an unknown sslmode, a pool_max_conns that is
// not a number, …), or nil. The reason never holds the URL's password.
func CheckPostgresURL(raw string) error {
	_, err := pgxpool.ParseConfig(raw)
	if err == nil {
		return nil
	}
	// pgx's message is "cannot parse `<the URL, its password redacted at
	// best>`: <reason>": only the reason is kept, and a password it might
	// still quote is masked
	msg := err.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	if u, perr := url.Parse(raw); perr == nil {
		pws := u.Query()["password"]
		if u.User != nil {
			if pw, ok := u.User.Password(); ok {
				pws = append(pws, pw)
			}
		}
		for _, pw := range pws {
			if pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return errors.New(msg)
}

// OpenPostgres connects to the database at url (a postgres:// URL or a
// key=value DSN), checks that it answers, and applies pending migrations
// unless cfg.SkipMigrate. An unreachable server gives an error wrapping
// ErrUnavailable; a malformed url one wrapping ErrInvalid.
func OpenPostgres(ctx context.Context, url string, cfg PostgresConfig) (*Postgres, error) {
	const op = "open postgres"
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The message of a parse error may quote the URL, password included.
		return nil, invalid(op, "malformed database URL")
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if pc.MinConns == 0 { // pool_min_conns not in the URL
		pc.MinConns = min(defaultMinConns, pc.MaxConns)
	}
	if cfg.ConnectTimeout > 0 {
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	} else if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "presenced"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, wrap(op, err, pgTransient)
	}
	p := &Postgres{pool: pool, conn: *pc.ConnConfig}
	p.reader = reader{p, pgReads}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, wrap(op, err, pgTransient)
	}
	if !cfg.SkipMigrate {
		applied, err := p.Migrate(ctx)
		if err != nil {
			pool.Close()
			return nil, err
		}
		logApplied(cfg.Logger, applied)
		_, _ = p.onMigrationConn(ctx, "schema version", func(ctx context.Context, db *sql.DB, d Dialect) ([]Migration, error) {
			warnAhead(ctx, cfg.Logger, db, d)
			return nil, nil
		})
	}
	return p, nil
}

// Migrate applies pending migrations (see the package function Migrate),
// on a connection of its own (see onMigrationConn).
func (p *Postgres) Migrate(ctx context.Context) ([]Migration, error) {
	return p.onMigrationConn(ctx, "migrate", Migrate)
}

// MigrationStatus lists the migrations and whether each is applied.
func (p *Postgres) MigrationStatus(ctx context.Context) ([]Migration, error) {
	return p.onMigrationConn(ctx, "migration status", MigrationStatus)
}

// onMigrationConn runs fn (Migrate or MigrationStatus) on a connection of
// its own that is closed afterwards, so the migration lock can never stay
// behind in the pool.
func (p *Postgres) onMigrationConn(ctx context.Context, op string, fn func(context.Context, *sql.DB, Dialect) ([]Migration, error)) ([]Migration, error) {
	if p.closed.Load() {
		return nil, wrap(op, errClosed, pgTransient)
	}
	db := stdlib.OpenDB(p.conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	return fn(ctx, db, DialectPostgres)
}

// Stats returns the statement counters.
func (p *Postgres) Stats() Stats { return p.counter.snapshot() }

func (p *Postgres) check(op string) error {
	if p.closed.Load() {
		return wrap(op, errClosed, pgTransient)
	}
	return nil
}

func (p *Postgres) exec(ctx context.Context, q pgxExecer, sql string, args ...any) (int64, error) {
	p.counter.statements.Add(1)
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	p.counter.rows.Add(tag.RowsAffected())
	return tag.RowsAffected(), nil
}

type pgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const pgUpsertLastSeen = `INSERT INTO last_seen (user_id, seen_at)
SELECT * FROM unnest($1::text[], $2::bigint[])
ON CONFLICT (user_id) DO UPDATE SET seen_at = GREATEST(last_seen.seen_at, EXCLUDED.seen_at)
WHERE last_seen.seen_at < EXCLUDED.seen_at`

// UpsertLastSeen implements Store: one INSERT ... ON CONFLICT for the whole
// batch, rows in user-id order so concurrent batches lock rows in one order.
func (p *Postgres) UpsertLastSeen(ctx context.Context, batch []LastSeen) error {
	const op = "upsert last seen"
	ids, ms, err := lastSeenRows(op, batch)
	if err != nil || len(ids) == 0 {
		return err
	}
	if err := p.check(op); err != nil {
		return err
	}
	_, err = p.exec(ctx, p.pool, pgUpsertLastSeen, ids, ms)
	return wrap(op, err, pgTransient)
}

// SetPrivacy implements Store.
func (p *Postgres) SetPrivacy(ctx context.Context, userID string, v Visibility) error {
	const op = "set privacy"
	if err := privacyArgs(op, userID, v); err != nil {
		return err
	}
	if err := p.check(op); err != nil {
		return err
	}
	_, err := p.exec(ctx, p.pool, `INSERT INTO privacy (user_id, last_seen) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET last_seen = EXCLUDED.last_seen
WHERE privacy.last_seen <> EXCLUDED.last_seen`, userID, string(v))
	return wrap(op, err, pgTransient)
}

// Advisory lock classes (pg_advisory_xact_lock(class, hashtext(id))): a
// replace of one owner's list waits for a concurrent replace of the same
// list, so the last one wins whole.
const (
	pgLockContacts int32 = 0x70726331 // "prc1"
	pgLockMembers  int32 = 0x70726d31 // "prm1"
)

// SetContacts implements Store: in one transaction, delete the contacts
// not in the new list and insert the missing ones.
func (p *Postgres) SetContacts(ctx context.Context, userID string, contacts []string) error {
	const op = "set contacts"
	ids, err := replaceArgs(op, "user id", userID, "contact id", contacts)
	if err != nil {
		return err
	}
	_, err = p.replace(ctx, op, pgLockContacts, userID, ids,
		`DELETE FROM contacts WHERE owner_id = $1 AND contact_id <> ALL($2::text[])`,
		`INSERT INTO contacts (owner_id, contact_id) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING`)
	return err
}

// SetMembers implements Store, like SetContacts; the deleted rows are the
// removed members.
func (p *Postgres) SetMembers(ctx context.Context, conversationID string, userIDs []string) ([]string, error) {
	const op = "set members"
	ids, err := replaceArgs(op, "conversation id", conversationID, "user id", userIDs)
	if err != nil {
		return nil, err
	}
	return p.replace(ctx, op, pgLockMembers, conversationID, ids,
		`DELETE FROM conversation_members WHERE conversation_id = $1 AND user_id <> ALL($2::text[]) RETURNING user_id`,
		`INSERT INTO conversation_members (conversation_id, user_id) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING`)
}

// replace runs del (which may return the deleted ids) then ins, both with
// ($1 key, $2 ids), in one transaction serialised per key.
func (p *Postgres) replace(ctx context.Context, op string, lockClass int32, key string, ids []string, del, ins string) (removed []string, err error) {
	if err := p.check(op); err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockClass, key); err != nil {
			return err
		}
		p.counter.statements.Add(1)
		rows, err := tx.Query(ctx, del, key, ids)
		if err != nil {
			return err
		}
		removed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		p.counter.rows.Add(rows.CommandTag().RowsAffected())
		_, err = p.exec(ctx, tx, ins, key, ids)
		return err
	})
	if err != nil {
		return nil, wrap(op, err, pgTransient)
	}
	slices.Sort(removed)
	if removed == nil {
		removed = []string{}
	}
	return removed, nil
}

// pgReads are the read statements on PostgreSQL.
var pgReads = readSQL{
	lastSeen:      `SELECT user_id, seen_at FROM last_seen WHERE user_id = ANY($1)`,
	privacy:       `SELECT user_id, last_seen FROM privacy WHERE user_id = ANY($1)`,
	contactOf:     `SELECT owner_id FROM contacts WHERE contact_id = $2 AND owner_id = ANY($1)`,
	contactsAmong: `SELECT contact_id FROM contacts WHERE owner_id = $2 AND contact_id = ANY($1)`,
	isMember:      `SELECT EXISTS (SELECT 1 FROM conversation_members WHERE conversation_id = $1 AND user_id = $2)`,
}

// idList implements querier: pgx sends a []string as a text[].
func (p *Postgres) idList(ids []string) any { return ids }

// query runs one read query and calls scan for each row.
func (p *Postgres) query(ctx context.Context, op, sql string, args []any, scan func(rowScanner) error) error {
	if err := p.check(op); err != nil {
		return err
	}
	p.counter.queries.Add(1)
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return wrap(op, err, pgTransient)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return wrap(op, err, pgTransient)
		}
	}
	return wrap(op, rows.Err(), pgTransient)
}

// Ping implements Store.
func (p *Postgres) Ping(ctx context.Context) error {
	const op = "ping"
	if err := p.check(op); err != nil {
		return err
	}
	return wrap(op, p.pool.Ping(ctx), pgTransient)
}

// Close implements Store. It waits for connections in use to be released;
// later calls return ErrUnavailable. Closing twice is harmless.
func (p *Postgres) Close() error {
	if p.closed.CompareAndSwap(false, true) {
		p.pool.Close()
	}
	return nil
}

// pgTransient reports whether err means PostgreSQL could not be reached or
// could not serve the request now (a retry may succeed): connection
// failures, timeouts, a closed pool, and the server's own "try again" codes.
func pgTransient(err error) bool {
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, puddle.ErrClosedPool) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) == 5 && pe.Code[:2] == "08": // connection exception
			return true
		case len(pe.Code) == 5 && pe.Code[:2] == "53": // insufficient resources (too many connections, ...)
			return true
		}
		switch pe.Code {
		case "57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"40001", "40P01", // serialization failure, deadlock detected
			"55P03", "57014": // lock not available, query canceled (statement_timeout)
			return true
		}
	}
	return false
}

var _ OnlineKeeper = (*Postgres)(nil)

// KeepOnline implements OnlineKeeper: one transaction.
func (p *Postgres) KeepOnline(ctx context.Context, alive time.Time, online, offline []string) error {
	const op = "keep online"
	on, off, ms, err := onlineArgs(op, alive, online, offline)
	if err != nil {
		return err
	}
	if err := p.check(op); err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if ms != 0 {
			if _, err := p.exec(ctx, tx, `INSERT INTO node_alive (id, seen_at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at`, ms); err != nil {
				return err
			}
		}
		if len(on) > 0 {
			if _, err := p.exec(ctx, tx, `INSERT INTO online_users (user_id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, on); err != nil {
				return err
			}
		}
		if len(off) > 0 {
			_, err := p.exec(ctx, tx, `DELETE FROM online_users WHERE user_id = ANY($1::text[])`, off)
			return err
		}
		return nil
	})
	return wrap(op, err, pgTransient)
}

// RecoverOnline implements OnlineKeeper: one transaction.
func (p *Postgres) RecoverOnline(ctx context.Context) (int, error) {
	const op = "recover online"
	if err := p.check(op); err != nil {
		return 0, err
	}
	var n int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM online_users`).Scan(&n); err != nil || n == 0 {
			return err
		}
		if _, err := p.exec(ctx, tx, `INSERT INTO last_seen (user_id, seen_at)
SELECT o.user_id, a.seen_at FROM online_users o JOIN node_alive a ON a.id = 1
ON CONFLICT (user_id) DO UPDATE SET seen_at = GREATEST(last_seen.seen_at, EXCLUDED.seen_at)
WHERE last_seen.seen_at < EXCLUDED.seen_at`); err != nil {
			return err
		}
		_, err := p.exec(ctx, tx, `DELETE FROM online_users`)
		return err
	})
	return n, wrap(op, err, pgTransient)
}
