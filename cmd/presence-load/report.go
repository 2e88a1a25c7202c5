package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type report struct {
	opt *options
	w   io.Writer
}

func (r *report) printf(format string, a ...any) { fmt.Fprintf(r.w, format, a...) }

func (r *report) header(lines []string) {
	r.printf("presence-load report\n")
	for _, l := range lines {
		r.printf("  %s\n", l)
	}
}

// progress goes to stderr with -v.
func (o *options) logf(format string, a ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
	}
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
	type kv struct {
		k string
		v int64
	}
	var list []kv
	for k, v := range s {
		list = append(list, kv{k, v})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].v > list[j].v })
	var parts []string
	for _, e := range list {
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
