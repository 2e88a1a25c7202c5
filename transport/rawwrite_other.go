//go:build !unix

package transport

// write is rawCall's callback. Elsewhere than on Unix it writes nothing:
// every write goes through the connection's own (deadline-bound) Write.
func (c *rawCall) write(uintptr) bool { return true }
