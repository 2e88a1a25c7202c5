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
// Measured with presence-load's typing scenario on two nodes (2 vCPUs,
// 20 rooms of 100, deep sleep against none, alternated runs): context
// switches halved (6,300-6,800 a second against 3,200-3,500 at 100
// changes/s, 12,800-13,500 against 7,100-7,200 at 500/s), server CPU 8-16 %
// lower at 100/s (perf's task-clock) and 10-18 % at 500/s, heartbeat CPU
// 10-20 % lower on one node (docs/benchmarks/presence-load.md).
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
