// Package deploy holds deployment files (the balancer configuration, the
// Prometheus alert rules, the Grafana dashboard); its test checks that the
// dashboard queries only series presenced exports.
package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	SchemaVersion int         `json:"schemaVersion"`
	Title         string      `json:"title"`
	UID           string      `json:"uid"`
	Panels        []dashPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// seriesName matches the metric names of presenced, the Go runtime and the
// process collector in a PromQL expression.
var seriesName = regexp.MustCompile(`\b(?:presenced|go|process)_[a-zA-Z0-9_]+`)

// sourceName matches the name of an instrument in presenced's source: an
// Opts' Name, or the first argument of the metrics package's constructors
// (metrics.NewCounter("presenced_…", …)).
var sourceName = regexp.MustCompile(`(?:Name:\s*|\bNew[A-Za-z]*\(\s*)"(presenced_[a-z0-9_]+)"`)

// registeredPresenced greps the repository's non-test Go files for the
// instruments' names.
func registeredPresenced(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range sourceName.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// a sanity floor: the grep must find the metrics package's instruments
	for _, n := range []string{"presenced_sockets_connected", "presenced_event_duration_seconds", "presenced_lastseen_dirty_users"} {
		if !names[n] {
			t.Fatalf("the source grep found no %s (found %d names): the pattern is out of date", n, len(names))
		}
	}
	return names
}

// runtimeSeries are the Go and process collectors' metric names, as
// presenced registers them (metrics.New).
func runtimeSeries(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/presenced.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/presenced.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Error("the dashboard needs a title and a uid")
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: Grafana 10/11 dashboards are 36 or later", d.SchemaVersion)
	}
	hasInput := false
	for _, in := range d.Inputs {
		if in.Name == "DS_PROMETHEUS" && in.PluginID == "prometheus" {
			hasInput = true
		}
	}
	if !hasInput {
		t.Error("no __inputs entry DS_PROMETHEUS (prometheus): the dashboard would not ask for a data source on import")
	}

	presenced := registeredPresenced(t)
	runtime := runtimeSeries(t)
	known := func(name string) bool {
		if presenced[name] || runtime[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} { // histogram and summary series
			if base, ok := strings.CutSuffix(name, suffix); ok && (presenced[base] || runtime[base]) {
				return true
			}
		}
		return false
	}

	queried := map[string]bool{}
	check := func(where, expr string) {
		for _, name := range seriesName.FindAllString(expr, -1) {
			queried[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
			if !known(name) {
				t.Errorf("%s queries %s, which presenced does not register", where, name)
			}
		}
	}
	ids := map[int]bool{}
	panels := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		panels++
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: its datasource is not ${DS_PROMETHEUS}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		check("variable "+v.Name, string(v.Query))
	}
	if panels < 10 {
		t.Errorf("only %d panels", panels)
	}
	for _, must := range []string{
		"presenced_sockets_connected", "presenced_handshakes_total", "presenced_events_total", "presenced_event_duration_seconds",
		"presenced_lastseen_dirty_users", "presenced_lastseen_flush_errors_total", "presenced_nodes_reaped_total",
		"presenced_slow_consumer_disconnects_total", "presenced_status_updates_queued", "go_goroutines", "process_resident_memory_bytes",
	} {
		if !queried[must] {
			t.Errorf("no panel shows %s", must)
		}
	}
	var missing []string
	for n := range presenced {
		if !queried[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Logf("registered but on no panel (add them when they matter to operators): %s", strings.Join(missing, ", "))
	}
}
