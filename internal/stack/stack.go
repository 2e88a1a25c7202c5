// Package stack grows a goroutine's stack ahead of deep work.
//
// A new goroutine starts with the runtime's small initial stack, and the
// stack grows by doubling: each growth copies the stack and walks and
// adjusts every frame on it (runtime.copystack). Deep library paths (the
// Socket.IO handshake, encoding/json, pgx) grew their goroutines' stacks
// several times each, deep in the call chain: 9 % of the server's CPU in a
// connect burst. Grow, called where such a goroutine starts its work, grows
// the stack once, while it holds only a few frames.
package stack

// Reserve is the frame Grow makes room for: the stack is at least twice
// that afterwards.
const Reserve = 8 << 10

// zero is 0: an index the compiler cannot see as constant, so that it
// keeps grow's frame.
var zero int

// Grow grows the calling goroutine's stack, in one step, to hold a frame
// of Reserve bytes (nothing when it already does).
func Grow() { _ = grow(zero) }

//go:noinline
func grow(i int) byte {
	var b [Reserve]byte
	return b[i]
}
