//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// perfProfile samples a process with `perf record -e cpu-clock` for d and
// returns its hottest functions and the share of each package. Empty if
// perf is missing or fails.
func perfProfile(pid int, d time.Duration) string {
	bin, err := exec.LookPath("perf")
	if err != nil {
		return "    (perf not found)\n"
	}
	dir, err := os.MkdirTemp("", "presence-load-perf-")
	if err != nil {
		return ""
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command(bin, "record", "-q", "-e", "cpu-clock", "-F", "499", "-p", strconv.Itoa(pid), "-o", data,
		"--", "sleep", fmt.Sprintf("%.1f", d.Seconds()))
	if out, err := rec.CombinedOutput(); err != nil {
		return fmt.Sprintf("    (perf record failed: %v %s)\n", err, clip(out))
	}
	rep := exec.Command(bin, "report", "-i", data, "--stdio", "--no-children", "--sort", "symbol", "-F", "overhead,sym", "--percent-limit", "0.3")
	out, err := rep.Output()
	if err != nil {
		return fmt.Sprintf("    (perf report failed: %v)\n", err)
	}
	type row struct {
		pct float64
		sym string
	}
	var rows []row
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		p, rest, ok := strings.Cut(l, "%")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			continue
		}
		sym := strings.TrimSpace(rest)
		if i := strings.Index(sym, "  "); i > 0 {
			sym = sym[:i]
		}
		rows = append(rows, row{v, sym})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].pct > rows[j].pct })
	pkgs := map[string]float64{}
	for _, r := range rows {
		pkgs[symbolPackage(r.sym)] += r.pct
	}
	pl := largestFirst(pkgs)
	var b strings.Builder
	b.WriteString("    by package (functions ≥ 0.3% only): ")
	for i, p := range pl {
		if i == 12 {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1f%%", p.k, p.v)
	}
	b.WriteString("\n    hottest functions:\n")
	for i, r := range rows {
		if i == 20 {
			break
		}
		fmt.Fprintf(&b, "      %5.2f%%  %s\n", r.pct, r.sym)
	}
	return b.String()
}

// symbolPackage maps a perf symbol such as "[.] github.com/a/b.(*T).M" to
// its package ("github.com/a/b"), "[k] ..." to "kernel".
func symbolPackage(sym string) string {
	if strings.HasPrefix(sym, "[k]") {
		return "kernel"
	}
	s := strings.TrimSpace(strings.TrimPrefix(sym, "[.]"))
	slash := strings.LastIndexByte(s, '/')
	dot := strings.IndexByte(s[slash+1:], '.')
	if dot < 0 {
		return s
	}
	pkg := s[:slash+1+dot]
	// shorten well-known roots
	for _, p := range []string{"github.com/zishang520/socket.io/", "github.com/presenced/presenced/", "github.com/redis/go-redis/"} {
		if strings.HasPrefix(pkg, p) {
			return strings.TrimPrefix(pkg, "github.com/")
		}
	}
	return pkg
}
