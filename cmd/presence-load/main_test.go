//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestParseScenarios(t *testing.T) {
	got, err := parseScenarios("all")
	if err != nil || !got["heartbeat"] || !got["subscribe"] || got["idle"] || got["typing"] {
		t.Fatalf("all: %v %v", got, err)
	}
	got, err = parseScenarios("side")
	if err != nil || len(got) != len(scenarioOrder) {
		t.Fatalf("side: %v %v", got, err)
	}
	got, err = parseScenarios("idle, typing")
	if err != nil || !got["idle"] || !got["typing"] || len(got) != 2 {
		t.Fatalf("idle,typing: %v %v", got, err)
	}
	if _, err := parseScenarios("nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	if _, err := parseScenarios(""); err == nil {
		t.Fatal("empty list accepted")
	}
}

func TestApplyQuickKeepsExplicitFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n := fs.Int("n", 10000, "")
	idle := fs.Int("idle-n", 10000, "")
	d := fs.Duration("typing-duration", 20*time.Second, "")
	for name := range quickDefaults {
		if fs.Lookup(name) == nil {
			fs.String(name, "", "")
		}
	}
	if err := fs.Parse([]string{"-n", "42"}); err != nil {
		t.Fatal(err)
	}
	applyQuick(fs)
	if *n != 42 {
		t.Errorf("explicit -n overridden: %d", *n)
	}
	if *idle != 2000 || *d != 5*time.Second {
		t.Errorf("quick defaults not applied: idle-n %d, typing-duration %s", *idle, *d)
	}
}

func TestReportJSON(t *testing.T) {
	o := &options{server: "node"}
	r := &report{opt: o, w: &bytes.Buffer{}, started: time.Now()}
	var h hist
	h.record(2 * time.Millisecond)
	r.figHist("typing_1node", "delivery", &h)
	r.fig("idle", "rss_idle_per_socket", 12.5, "KiB", "lower")
	r.fig("idle", "nan", math.NaN(), "x", "lower")
	var empty hist
	r.figHist("idle", "empty", &empty)
	var buf bytes.Buffer
	if err := r.writeJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Server  string   `json:"server"`
		Failed  []string `json:"failed"`
		Figures []figure `json:"figures"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if out.Server != "node" || out.Failed == nil || len(out.Figures) != 3 {
		t.Fatalf("unexpected JSON: %s", buf.String())
	}
	if f := out.Figures[0]; f.Name != "delivery_p50" || f.Unit != "ms" || f.Better != "lower" || f.Value < 1.9 || f.Value > 2.1 {
		t.Fatalf("first figure: %+v", f)
	}
}

func TestGeneratorMemLimit(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct{ total, want int64 }{
		{0, 2 * gib},           // unknown
		{2 * gib, 1 * gib},     // small machine: the floor
		{24 * gib, 6 * gib},    // a quarter
		{256 * gib, 8 * gib},   // the cap
		{-1, 2 * gib},          // unknown
		{6 * gib, 6 * gib / 4}, // a quarter, between the bounds
	} {
		if got := generatorMemLimit(c.total); got != c.want {
			t.Errorf("generatorMemLimit(%d) = %d, want %d", c.total, got, c.want)
		}
	}
	if runtime.GOOS == "linux" && memTotal() <= 0 {
		t.Error("memTotal() found no MemTotal in /proc/meminfo")
	}
}

func TestPauseGC(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: pauseGC leaves the collector alone")
	}
	pct := debug.SetGCPercent(generatorGOGC)
	defer debug.SetGCPercent(pct)
	limit := debug.SetMemoryLimit(-1)
	resume := pauseGC()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("GC percent during the pause = %d, want -1 (off)", got)
	}
	if got, want := debug.SetMemoryLimit(-1), generatorMemLimit(memTotal()); got != want {
		t.Errorf("memory limit during the pause = %d, want %d", got, want)
	}
	resume()
	if got := debug.SetGCPercent(generatorGOGC); got != generatorGOGC {
		t.Errorf("GC percent after the pause = %d, want %d", got, generatorGOGC)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit after the pause = %d, want %d", got, limit)
	}
}
