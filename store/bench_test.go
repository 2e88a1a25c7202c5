package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/store/storetest"
)

// BenchmarkUpsertLastSeen: one op is a batch of 1,000 users (the default
// PRESENCE_LASTSEEN_FLUSH_BATCH); stmts/op must be 1.
func BenchmarkUpsertLastSeen(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchUpsert(b, storetest.MustOpen(b, sqliteBackend)) })
	b.Run("postgres", func(b *testing.B) {
		pgAdmin(b)
		benchUpsert(b, storetest.MustOpen(b, postgresBackend))
	})
}

// benchUpsert writes batches of 1,000 distinct users with rising times, so
// every row of every batch changes, and reports statements per batch.
func benchUpsert(b *testing.B, s storetest.Store) {
	const batchSize, users = 1000, 10_000
	ids := make([]string, users)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-user-%05d", i)
	}
	batch := make([]store.LastSeen, batchSize)
	t0 := time.Now()
	before := s.Stats()
	n := 0
	for b.Loop() {
		for i := range batch {
			batch[i] = store.LastSeen{UserID: ids[(n*batchSize+i)%users], At: t0.Add(time.Duration(n) * time.Millisecond)}
		}
		if err := s.UpsertLastSeen(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		n++
	}
	after := s.Stats()
	b.ReportMetric(float64(after.Statements-before.Statements)/float64(n), "stmts/op")
	b.ReportMetric(float64(after.Rows-before.Rows)/float64(n), "rows/op")
	if after.Statements-before.Statements != int64(n) {
		b.Errorf("%d batches took %d statements", n, after.Statements-before.Statements)
	}
}
