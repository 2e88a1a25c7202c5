package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSteadySysmonEnv(t *testing.T) {
	const ours = "GODEBUG=schedtrace=2147483647"
	cases := []struct {
		name string
		in   []string
		want []string // nil: no re-execution
	}{
		{"no GODEBUG", []string{"A=1", "B=2"}, []string{"A=1", "B=2", ours}},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"A=1", ours}},
		{"other settings kept", []string{"GODEBUG=madvdontneed=1,gctrace=0", "A=1"}, []string{"A=1", "GODEBUG=madvdontneed=1,gctrace=0,schedtrace=2147483647"}},
		{"the operator's schedtrace", []string{"GODEBUG=gctrace=1,schedtrace=0"}, nil},
		{"after the re-execution", []string{"A=1", ours}, nil},
		{"schedtrace with spaces", []string{"GODEBUG=gctrace=1, schedtrace=1000"}, nil},
		{"a longer name is another setting", []string{"GODEBUG=schedtracex=1"}, []string{"GODEBUG=schedtracex=1,schedtrace=2147483647"}},
	}
	for _, c := range cases {
		got := steadySysmonEnv(c.in)
		if !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: steadySysmonEnv(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// The built program executes itself again with schedtrace in GODEBUG, and
// only when the setting is on and GODEBUG does not set schedtrace; it then
// serves as before.
func TestServeExecutesAgainForSysmon(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if testing.Short() {
		t.Skip("builds the program")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "presenced")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cases := []struct {
		name    string
		args    []string
		godebug string // GODEBUG given; "-": none
		want    string // GODEBUG the serving process has; "": none
	}{
		{"default", nil, "-", "schedtrace=2147483647"},
		{"other GODEBUG settings kept", nil, "madvdontneed=1", "madvdontneed=1,schedtrace=2147483647"},
		{"off", []string{"--sysmon-steady=false"}, "-", ""},
		{"the operator's schedtrace", nil, "schedtrace=0", "schedtrace=0"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"+string(rune('a'+i))), "--log-level", "warn"}, c.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
				return strings.HasPrefix(kv, "GODEBUG=") || strings.HasPrefix(kv, "PRESENCE_") ||
					strings.HasPrefix(kv, "REDIS_URL=") || strings.HasPrefix(kv, "DATABASE_URL=")
			})
			if c.godebug != "-" {
				cmd.Env = append(cmd.Env, "GODEBUG="+c.godebug)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			// the dev banner comes after the listener, well after any re-execution
			ready := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if strings.Contains(sc.Text(), "presenced is running") {
						ready <- true
					}
				}
				close(ready)
			}()
			select {
			case ok := <-ready:
				if !ok {
					t.Fatal("presenced exited before it served")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("presenced did not serve within 20 s")
			}
			raw, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, kv := range strings.Split(string(raw), "\x00") {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					got = v
				}
			}
			if got != c.want {
				t.Errorf("the serving process has GODEBUG %q, want %q", got, c.want)
			}
		})
	}
}
