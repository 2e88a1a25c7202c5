//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"
)

type report struct {
	opt        *options
	w          io.Writer
	started    time.Time
	conditions []string
	done       []string // scenarios that finished
	failed     []string // scenarios that failed, with the error

	mu   sync.Mutex
	figs []figure
}

// figure is one machine-readable result (-json).
type figure struct {
	Scenario string  `json:"scenario"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Better   string  `json:"better"` // "lower", "higher" or "none" (a condition, e.g. the load of other processes)
	Note     string  `json:"note,omitempty"`
}

// fig records a figure for -json; NaN and infinite values are left out.
func (r *report) fig(scenario, name string, v float64, unit, better string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r.mu.Lock()
	r.figs = append(r.figs, figure{Scenario: scenario, Name: name, Value: v, Unit: unit, Better: better})
	r.mu.Unlock()
}

// figMs records a latency in milliseconds.
func (r *report) figMs(scenario, name string, d time.Duration) {
	r.fig(scenario, name, float64(d)/float64(time.Millisecond), "ms", "lower")
}

// figHist records p50 and p99 of a histogram (nothing when it is empty).
func (r *report) figHist(scenario, name string, h *hist) {
	if h.count.Load() == 0 {
		return
	}
	r.figMs(scenario, name+"_p50", h.quantile(0.5))
	r.figMs(scenario, name+"_p99", h.quantile(0.99))
}

func (r *report) writeJSON(w io.Writer) error {
	out := struct {
		Server     string    `json:"server"`
		Started    time.Time `json:"started"`
		Seconds    float64   `json:"seconds"`
		Conditions []string  `json:"conditions"`
		Scenarios  []string  `json:"scenarios"`
		Failed     []string  `json:"failed"`
		Figures    []figure  `json:"figures"`
	}{r.opt.server, r.started.UTC(), time.Since(r.started).Seconds(), r.conditions, r.done, r.failed, r.figs}
	if out.Failed == nil {
		out.Failed = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func (r *report) printf(format string, a ...any) {
	r.opt.clearProgress()
	fmt.Fprintf(r.w, format, a...)
}

func (r *report) header(lines []string) {
	r.printf("presence-load report\n")
	for _, l := range lines {
		r.printf("  %s\n", l)
	}
}

// progress goes to stderr with -v; without -v, when stdout is a
// terminal, the last step is shown on one progress line.
func (o *options) logf(format string, a ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
		return
	}
	o.progress(format, a...)
}

var progressMu sync.Mutex

// progress rewrites the progress line (stdout a terminal, no -v).
func (o *options) progress(format string, a ...any) {
	if !o.tty || o.verbose {
		return
	}
	progressMu.Lock()
	defer progressMu.Unlock()
	msg := fmt.Sprintf(format, a...)
	if len(msg) > 100 {
		msg = msg[:100]
	}
	fmt.Fprintf(os.Stderr, "\r\033[K[%s] %s: %s", time.Now().Format("15:04:05"), o.server, msg)
}

func (o *options) clearProgress() {
	if !o.tty || o.verbose {
		return
	}
	progressMu.Lock()
	defer progressMu.Unlock()
	fmt.Fprint(os.Stderr, "\r\033[K")
}

// table prints rows with aligned columns.
func (r *report) table(rows [][]string) {
	widths := map[int]int{}
	for _, row := range rows {
		for i, c := range row {
			if n := len([]rune(c)); n > widths[i] {
				widths[i] = n
			}
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range row {
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(c))+2))
			}
		}
		r.printf("%s\n", strings.TrimRight(b.String(), " "))
	}
}

// cmdBreakdown formats per-operation command counts, largest first.
func cmdBreakdown(s cmdStats, n float64) string {
	var parts []string
	for _, e := range largestFirst(s) {
		if float64(e.v)/n < 0.005 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(e.k), float64(e.v)/n))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// problems prints the WARN/ERROR lines of the nodes' logs.
func (r *report) problems(e *env) {
	for _, n := range e.nodes {
		lines, total := logProblems(n.logPath, 8)
		if total == 0 {
			r.printf("  node %d log: no warnings or errors\n", n.idx)
			continue
		}
		r.printf("  node %d log: %d warning/error lines; first ones:\n", n.idx, total)
		for _, l := range lines {
			r.printf("    %s\n", l)
		}
	}
}

func pct(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

func cores(d, over time.Duration) string {
	if over <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", d.Seconds()/over.Seconds())
}
