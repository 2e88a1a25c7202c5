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
	"slices"
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
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
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

// vecLabels matches a vector built by the metrics package's constructors,
// (New…Vec("presenced_…", "help", "label", …)), with its labels.
var vecLabels = regexp.MustCompile(`\bNew[A-Za-z]*Vec\(\s*"(presenced_[a-z0-9_]+)",\s*"(?:[^"\\]|\\.)*",\s*((?:"[a-z_]+",?\s*)+)\)`)

// optsLabels matches the labels after an Opts literal ("}, []string{…}"),
// in the source that follows an Opts' Name up to the next Name.
var optsLabels = regexp.MustCompile(`\},\s*\[\]string\{([^}]*)\}`)

// quoted matches the string literals of a label list.
var quoted = regexp.MustCompile(`"([a-z_]+)"`)

// registeredPresenced greps the repository's non-test Go files for the
// instruments' names, and each one's labels (none for a plain instrument).
func registeredPresenced(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
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
		src := string(b)
		for _, m := range sourceName.FindAllStringSubmatch(src, -1) {
			if _, ok := names[m[1]]; !ok {
				names[m[1]] = []string{}
			}
		}
		labels := func(list string) []string {
			var out []string
			for _, q := range quoted.FindAllStringSubmatch(list, -1) {
				out = append(out, q[1])
			}
			return out
		}
		for _, m := range vecLabels.FindAllStringSubmatch(src, -1) {
			names[m[1]] = labels(m[2])
		}
		chunks := strings.Split(src, "Name:")
		for _, c := range chunks[1:] {
			m := sourceName.FindStringSubmatch("Name:" + c)
			if m == nil || !strings.HasPrefix(strings.TrimSpace(c), `"`+m[1]+`"`) {
				continue
			}
			if l := optsLabels.FindStringSubmatch(c); l != nil {
				names[m[1]] = labels(l[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// a sanity floor: the grep must find the metrics package's instruments
	for _, n := range []string{"presenced_sockets_connected", "presenced_event_duration_seconds", "presenced_lastseen_dirty_users"} {
		if _, ok := names[n]; !ok {
			t.Fatalf("the source grep found no %s (found %d names): the pattern is out of date", n, len(names))
		}
	}
	for n, want := range map[string]string{"presenced_events_total": "event,outcome", "presenced_event_duration_seconds": "event", "presenced_lastseen_records_total": "result", "presenced_admin_logins_total": "outcome"} {
		if got := strings.Join(names[n], ","); got != want {
			t.Fatalf("the source grep found the labels %q for %s, want %q: the pattern is out of date", got, n, want)
		}
	}
	return names
}

// exprGrouping and exprMatcher match the label names a PromQL expression uses: in by (…) and
// without (…) clauses, and in selectors' matchers ({label="…"}).
var (
	exprGrouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	exprMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	legendLabel  = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// checkLabels reports each label an expression (or its legend) uses that
// none of the presenced series it queries has. Labels Prometheus adds
// (instance, job) and a histogram's le are every series'; an expression
// of no presenced series is not checked.
func checkLabels(t *testing.T, where, expr, legend string, presenced map[string][]string) {
	t.Helper()
	var have []string
	ours := false
	for _, name := range seriesName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if _, reg := presenced[base]; reg {
					name = base
				}
			}
		}
		if l, ok := presenced[name]; ok {
			ours = true
			have = append(have, l...)
		}
	}
	if !ours {
		return
	}
	var used []string
	for _, g := range exprGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			used = append(used, strings.TrimSpace(l))
		}
	}
	for _, m := range exprMatcher.FindAllStringSubmatch(expr, -1) {
		used = append(used, m[1])
	}
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		used = append(used, m[1])
	}
	for _, l := range used {
		switch {
		case l == "" || l == "instance" || l == "job" || l == "le":
		case !slices.Contains(have, l):
			t.Errorf("%s uses the label %q, which its series do not have (they have %q): %s", where, l, have, expr)
			return
		}
	}
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
		if _, ok := presenced[name]; ok || runtime[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} { // histogram and summary series
			if base, ok := strings.CutSuffix(name, suffix); ok && (presenced[base] != nil || runtime[base]) {
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
			checkLabels(t, "panel "+p.Title, tg.Expr, tg.LegendFormat, presenced)
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

// The alert rules query only series presenced exports, with their labels.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	presenced := registeredPresenced(t)
	rules := 0
	for _, line := range strings.Split(string(b), "\n") {
		expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:")
		if !ok {
			continue
		}
		rules++
		for _, name := range seriesName.FindAllString(expr, -1) {
			if _, ok := presenced[strings.TrimSuffix(name, "_bucket")]; !ok {
				t.Errorf("the rule %q queries %s, which presenced does not register", expr, name)
			}
		}
		checkLabels(t, "the rule", expr, "", presenced)
	}
	if rules < 5 {
		t.Fatalf("only %d rules found in prometheus-alerts.yml", rules)
	}
}
