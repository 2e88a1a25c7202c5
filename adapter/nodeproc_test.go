package adapter_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/adapter"
)

// e2eDir is ../e2e, where the interop script and its node_modules live.
func e2eDir(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "e2e"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range []string{"socket.io", "@socket.io/redis-adapter", "@socket.io/redis-emitter", "redis", "notepack.io"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m, "package.json")); err != nil {
			tb.Fatalf("Node modules for the interop tests are missing (%s in %s/node_modules): run make e2e-deps", m, dir)
		}
	}
	return dir
}

// nodeServer is a Node Socket.IO server with @socket.io/redis-adapter
// (e2e/interop/node-server.mjs), driven over its stdin/stdout.
type nodeServer struct {
	tb     testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	url    string
	uid    string
	stderr bytes.Buffer

	mu      sync.Mutex
	pending map[int]chan nodeReply
	sse     []sseCall
	nextID  int
	done    chan struct{}
}

type nodeReply struct {
	Result json.RawMessage `json:"result"`
	Error  *string         `json:"error"`
}

func startNodeServer(tb testing.TB, mode, prefix string) *nodeServer {
	tb.Helper()
	dir := e2eDir(tb)
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Fatalf("node not found (Node.js 20+ is needed for the interop tests): %v", err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "interop", "node-server.mjs"))
	cmd.Dir = filepath.Join(dir, "interop")
	cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL(), "PREFIX="+prefix, "MODE="+mode)
	n := &nodeServer{tb: tb, cmd: cmd, pending: map[int]chan nodeReply{}, done: make(chan struct{})}
	cmd.Stderr = &syncWriter{w: &n.stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if n.stdin, err = cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start node: %v", err)
	}
	ready := make(chan map[string]any, 1)
	go n.read(stdout, ready)
	tb.Cleanup(n.stop)
	select {
	case r := <-ready:
		port, _ := r["port"].(float64)
		n.url = "http://127.0.0.1:" + strconv.Itoa(int(port))
		n.uid, _ = r["uid"].(string)
	case <-n.done:
		tb.Fatalf("node server exited: %s", n.stderr.String())
	case <-time.After(15 * time.Second):
		tb.Fatalf("node server not ready: %s", n.stderr.String())
	}
	return n
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (n *nodeServer) read(r io.Reader, ready chan<- map[string]any) {
	defer close(n.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var head struct {
			ID    *int   `json:"id"`
			Event string `json:"event"`
		}
		line := sc.Bytes()
		if json.Unmarshal(line, &head) != nil {
			continue
		}
		switch {
		case head.ID != nil:
			var rep nodeReply
			_ = json.Unmarshal(line, &rep)
			n.mu.Lock()
			ch := n.pending[*head.ID]
			delete(n.pending, *head.ID)
			n.mu.Unlock()
			if ch != nil {
				ch <- rep
			}
		case head.Event == "ready":
			var m map[string]any
			_ = json.Unmarshal(line, &m)
			ready <- m
		case head.Event == "sse":
			var ev struct {
				Name string `json:"name"`
				Args []any  `json:"args"`
			}
			_ = json.Unmarshal(line, &ev)
			n.mu.Lock()
			n.sse = append(n.sse, sseCall{name: ev.Name, args: fromWire(ev.Args).([]any)})
			n.mu.Unlock()
		}
	}
}

func (n *nodeServer) stop() {
	_ = n.stdin.Close()
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	_ = n.cmd.Wait()
}

// call runs a command of the Node server and returns its result ($bin values
// as []byte).
func (n *nodeServer) call(tb testing.TB, cmd string, params map[string]any) any {
	tb.Helper()
	v, err := n.tryCall(cmd, params)
	if err != nil {
		tb.Fatalf("node %s: %v", cmd, err)
	}
	return v
}

func (n *nodeServer) tryCall(cmd string, params map[string]any) (any, error) {
	n.mu.Lock()
	id := n.nextID
	n.nextID++
	ch := make(chan nodeReply, 1)
	n.pending[id] = ch
	n.mu.Unlock()
	req := map[string]any{"id": id, "cmd": cmd}
	for k, v := range params {
		req[k] = toWire(v)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := n.stdin.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	select {
	case rep := <-ch:
		if rep.Error != nil {
			return nil, fmt.Errorf("%s", *rep.Error)
		}
		var v any
		if err := json.Unmarshal(rep.Result, &v); err != nil {
			return nil, err
		}
		return fromWire(v), nil
	case <-n.done:
		return nil, fmt.Errorf("node server exited: %s", n.stderr.String())
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("no answer")
	}
}

// waitServerCount waits until the Node server counts want servers.
func (n *nodeServer) waitServerCount(t *testing.T, want int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("node sees %d servers", want), func() bool {
		c, err := n.tryCall("serverCount", nil)
		return err == nil && c == float64(want)
	})
}

func (n *nodeServer) sseCalls(name string) []sseCall {
	n.mu.Lock()
	defer n.mu.Unlock()
	return callsNamed(n.sse, name)
}

// emit broadcasts from the Node server to everyone (for fence).
func (n *nodeServer) emit(ev string, args ...any) {
	n.call(n.tb, "broadcast", map[string]any{"event": ev, "args": args})
}

func toWire(v any) any {
	if b, ok := v.([]byte); ok {
		return map[string]any{"$bin": base64.StdEncoding.EncodeToString(b)}
	}
	return copyElems(v, toWire)
}

func fromWire(v any) any {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if s, ok := m["$bin"].(string); ok {
			b, _ := base64.StdEncoding.DecodeString(s)
			return b
		}
	}
	return adapter.ReplaceElems(v, fromWire)
}
