package adapter

import (
	"errors"
	"strconv"
	"syscall"
	"testing"
	"unsafe"
)

// hugeZeros maps n bytes of zeros without committing memory (pages are
// read from the shared zero page), or skips the test where it cannot.
func hugeZeros(t *testing.T, n int) []byte {
	t.Helper()
	if strconv.IntSize < 64 {
		t.Skip("needs a 64-bit address space")
	}
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("mmap of %d bytes: %v", n, err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return m
}

// msgpack lengths have 32 bits: a string or binary of 2^32 bytes or more
// is refused, not written with its length cut to its low 32 bits (which
// readers would then take for a short value followed by garbage). The
// length is checked before a byte is copied.
func TestMsgpackEncodeRefusesLengthsOver32Bits(t *testing.T) {
	zeros := hugeZeros(t, 1<<32)
	s := unsafe.String(&zeros[0], len(zeros))
	for _, v := range []any{
		zeros, s, []any{1, s}, []string{s}, obj{{s, 1}}, obj{{"k", zeros}}, // (a map key would be hashed: 4 GB read)
	} {
		if _, err := encodeMsgpack(v); !errors.Is(err, errUnsupported) {
			t.Errorf("%T holding 2^32 bytes: %v, want %v", v, err, errUnsupported)
		}
	}
}
