package main

import "strings"

// The Go runtime's system monitor (PRESENCE_SYSMON_STEADY).
//
// sysmon is the runtime's own thread that retakes processors from long
// system calls and preempts long-running goroutines. It sleeps 20 µs at a
// time and doubles that, up to 10 ms, once it has found nothing to do for
// 50 rounds. When every processor is idle it sleeps deeply instead, until
// the next timer, and the first system call after that wakes it and starts
// it over at 20 µs. A presence node at a few hundred events per second
// idles between events, and each event makes system calls (a write per
// recipient), so sysmon spent every event waking each 20 µs (about 70 µs
// with the kernel's timer slack) for as long as the node worked.
//
// Measured with presence-load's typing scenario on two nodes (2 vCPUs, each
// window 8 s into a 20 s run, deep sleep against none, two runs each):
//   - 100 changes/s: 6,300-6,800 context switches a second against
//     3,200-3,400, half of them sysmon's; server CPU 0.28-0.30 cores against
//     0.22-0.23; delivery p99 3.5-4.8 ms against 2.5-3.3;
//   - 500 changes/s: 12,800-13,500 context switches a second against
//     7,100-7,200; server CPU 0.72-0.78 cores against 0.64-0.65; delivery
//     p99 42-54 ms against 11-29.
//
// Only GODEBUG's schedtrace keeps sysmon out of its deep sleep (the runtime
// keeps it awake to print the trace on time), and GODEBUG is read once, at
// start: so the node executes itself again with schedtrace at its longest
// period, 2^31-1 ms (24.8 days), before it does anything else. It then
// prints at most one SCHED line to stderr in that time, and sysmon wakes
// at most every 10 ms while the node idles (a few µs of CPU each) and
// each 20 µs only after it had to retake a processor.

// schedtraceKey is the GODEBUG setting, schedtraceMax its longest period
// in milliseconds (the runtime stores it in an int32).
const (
	schedtraceKey = "schedtrace"
	schedtraceMax = "2147483647"
)

// steadySysmonEnv is environ with schedtrace added to GODEBUG, or nil if
// GODEBUG already sets schedtrace (to any value: the operator's, or ours
// after the re-execution).
func steadySysmonEnv(environ []string) []string {
	out := make([]string, 0, len(environ)+1)
	debug := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			debug = v
			continue
		}
		out = append(out, kv)
	}
	for _, s := range strings.Split(debug, ",") {
		if k, _, _ := strings.Cut(s, "="); strings.TrimSpace(k) == schedtraceKey {
			return nil
		}
	}
	setting := schedtraceKey + "=" + schedtraceMax
	if debug != "" {
		setting = debug + "," + setting
	}
	return append(out, "GODEBUG="+setting)
}

// reexec replaces the process with the same program, arguments and the
// environment env; main sets it (execSelf), so that tests, which drive
// run, never replace the test binary.
var reexec func(env []string) error
