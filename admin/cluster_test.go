package admin_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/admin"
	"github.com/presenced/presenced/handlers"
	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

func testRedis(tb testing.TB) (redis.UniversalClient, string) {
	tb.Helper()
	rdb := redistest.Client(tb)
	return rdb, redistest.Prefix(tb, rdb, "test-admin-")
}

// TestClusterStatsRedis: each node publishes its figures to Redis, and the
// cluster view of either lists both.
func TestClusterStatsRedis(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "a.db"), store.SQLiteConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var urls []string
	var engs []*presence.RedisEngine
	var stops []context.CancelFunc
	for _, node := range []string{"n1", "n2"} {
		eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: node}, presence.RedisConfig{Prefix: prefix})
		engs = append(engs, eng)
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		buf := lastseen.NewRedis(rdb, lastseen.RedisConfig{Prefix: prefix})
		p, err := admin.New(admin.Config{Token: token, NodeID: node, Prefix: prefix, PublishEvery: 100 * time.Millisecond}, admin.Deps{
			Log: slog.New(slog.DiscardHandler), Engine: eng, View: eng,
			Reader:   lastseen.NewReader(lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: st}),
			Pipeline: lastseen.NewPipeline(buf, st, lastseen.Config{}), Buffer: buf, Store: st,
			Sockets: &fakeSockets{local: map[string][]handlers.LocalSocket{}}, Redis: rdb,
		})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		stops = append(stops, stop)
		ran := make(chan struct{})
		go func() { defer close(ran); _ = p.Run(runCtx) }()
		defer func() { stop(); <-ran }()
		mux := http.NewServeMux()
		mux.Handle("/admin/", http.StripPrefix("/admin", p.Handler()))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	for i, u := range urls {
		c := sessionAt(t, u)
		deadline := time.Now().Add(5 * time.Second)
		for {
			var cl struct {
				Cluster bool `json:"cluster"`
				Nodes   []struct {
					Node       string         `json:"node"`
					Self       bool           `json:"self"`
					LeaseAgeMs *int64         `json:"leaseAgeMs"`
					History    []admin.Sample `json:"history"`
				} `json:"nodes"`
			}
			getJSON(t, c, u+"/admin/api/cluster", &cl)
			if len(cl.Nodes) == 2 && cl.Cluster && cl.Nodes[0].Node == "n1" && cl.Nodes[1].Node == "n2" &&
				cl.Nodes[i].Self && cl.Nodes[0].LeaseAgeMs != nil && cl.Nodes[1].LeaseAgeMs != nil && len(cl.Nodes[1-i].History) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d's view: %+v", i+1, cl)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// the last-seen page lists both nodes' flushes
	var ls struct {
		Nodes []struct {
			Node  string `json:"node"`
			Flush struct {
				Errors int64 `json:"errors"`
			} `json:"flush"`
		} `json:"nodes"`
	}
	getJSON(t, sessionAt(t, urls[0]), urls[0]+"/admin/api/lastseen", &ls)
	if len(ls.Nodes) != 2 || ls.Nodes[0].Node != "n1" || ls.Nodes[1].Node != "n2" {
		t.Fatalf("lastseen nodes %+v", ls.Nodes)
	}
	// the published hash expires
	if ttl := rdb.PTTL(ctx, prefix+":admin:node:n1").Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("stats hash TTL %v", ttl)
	}
	// a figure JSON cannot write (a foreign writer's NaN) is left out; it
	// made the view answer 500, and the page stay blank (an audit)
	now := time.Now().UnixMilli()
	rdb.HSet(ctx, prefix+":admin:node:n9", "node", "n9", "at", now, "eps", "NaN")
	rdb.ZAdd(ctx, prefix+":admin:nodes", redis.Z{Score: float64(now), Member: "n9"})
	var withNaN struct {
		Nodes []struct {
			Node string `json:"node"`
		} `json:"nodes"`
	}
	getJSON(t, sessionAt(t, urls[0]), urls[0]+"/admin/api/cluster", &withNaN)
	if len(withNaN.Nodes) != 3 {
		t.Fatalf("cluster view with a node's NaN: %+v", withNaN)
	}
	rdb.ZRem(ctx, prefix+":admin:nodes", "n9")

	// n1's lease goes (it stopped): n2 still shows its last figures, but
	// its sockets are out of the total (3 each: fakeSockets); once n1's
	// panel stops, n1 is off n2's page at once.
	type clusterView struct {
		Sockets int64 `json:"sockets"`
		Nodes   []struct {
			Node       string `json:"node"`
			LeaseAgeMs *int64 `json:"leaseAgeMs"`
		} `json:"nodes"`
	}
	c2 := sessionAt(t, urls[1])
	waitView := func(what string, ok func(clusterView) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var cl clusterView
			getJSON(t, c2, urls[1]+"/admin/api/cluster", &cl)
			if ok(cl) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: n2's view %+v", what, cl)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitView("both counted", func(cl clusterView) bool { return cl.Sockets == 6 })
	if err := engs[0].Close(); err != nil {
		t.Fatal(err)
	}
	waitView("n1 without a lease, out of the total", func(cl clusterView) bool {
		return len(cl.Nodes) == 2 && cl.Nodes[0].Node == "n1" && cl.Nodes[0].LeaseAgeMs == nil && cl.Sockets == 3
	})
	stops[0]()
	waitView("n1 gone", func(cl clusterView) bool { return len(cl.Nodes) == 1 && cl.Nodes[0].Node == "n2" && cl.Sockets == 3 })
}
