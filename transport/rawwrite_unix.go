//go:build unix

package transport

import "syscall"

// write is rawCall's callback: what the non-blocking socket takes now.
func (c *rawCall) write(fd uintptr) bool {
	for c.n < len(c.b) {
		m, err := syscall.Write(int(fd), c.b[c.n:])
		if m > 0 {
			c.n += m
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
	}
	return true
}
