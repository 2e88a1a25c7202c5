package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
	"github.com/presenced/presenced/store/storetest"
)

// BenchmarkRESTQuery200 is the read benchmark: POST
// /v1/presence/query with 200 ids (100 online, 50 offline with a buffered
// last-seen, 50 offline known only to PostgreSQL) against real Redis and
// PostgreSQL, over real HTTP. It reports p50 and p99 latency.
//
//	go test -run '^$' -bench RESTQuery200 -benchtime 2000x ./handlers/
func BenchmarkRESTQuery200(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Client(b)
	prefix := redistest.Prefix(b, rdb, "bench-rest-")
	st, err := store.OpenPostgres(ctx, storetest.FreshPostgres(b, "presenced_bench"), store.PostgresConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()

	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "bench"}, presence.RedisConfig{Prefix: prefix})
	buf := lastseen.NewRedis(rdb, lastseen.RedisConfig{Prefix: prefix})
	var ids []string
	var stored, buffered []store.LastSeen
	now := time.Now()
	for i := range 200 {
		id := fmt.Sprintf("u%03d", i)
		ids = append(ids, id)
		switch {
		case i < 100:
			if err := eng.Connect(ctx, presence.Socket{ID: "s" + id, UserID: id}); err != nil {
				b.Fatal(err)
			}
		case i < 150:
			buffered = append(buffered, store.LastSeen{UserID: id, At: now.Add(-time.Duration(i) * time.Minute)})
		default:
			stored = append(stored, store.LastSeen{UserID: id, At: now.Add(-time.Duration(i) * time.Hour)})
		}
	}
	if err := buf.Record(ctx, buffered); err != nil {
		b.Fatal(err)
	}
	if err := st.UpsertLastSeen(ctx, stored); err != nil {
		b.Fatal(err)
	}
	v, _ := auth.NewHS256([]byte("bench-secret-0123456789"))
	token, _ := auth.SignHS256([]byte("bench-secret-0123456789"), "viewer", time.Hour, now)
	rest := handlers.NewREST(handlers.RESTDeps{
		Log: slog.New(slog.DiscardHandler), Verifier: v,
		Presences: lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: st}),
		Rosters:   eng, Store: st, RateLimit: -1,
	})
	r := chi.NewRouter()
	r.Mount("/v1", rest.Routes())
	srv := httptest.NewServer(r)
	defer srv.Close()
	body, _ := json.Marshal(map[string]any{"userIds": ids})
	client := srv.Client()

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/presence/query", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		lat = append(lat, time.Since(t0))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
