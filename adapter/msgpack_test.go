package adapter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// allocatedBy reports the bytes fn allocates.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Containers nested inside each other, each declaring as many elements as
// there are bytes left, must not each get a slice of that size: the
// elements still owed by the enclosing containers need those bytes too.
// (Each level used to allocate 16 bytes per remaining input byte: 6.5 KB
// of input made the decoder allocate 40 MB.)
func TestMsgpackNestedLengthsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		head byte
	}{{"array 32", 0xdd}, {"map 32", 0xdf}, {"array 16", 0xdc}, {"map 16", 0xde}} {
		const depth, pad = 500, 4000
		width := 4
		if tc.head == 0xdc || tc.head == 0xde {
			width = 2
		}
		total := depth*(1+width) + pad
		var in []byte
		for len(in) < depth*(1+width) {
			n := total - len(in) - 1 - width // every byte after this header
			in = append(in, tc.head)
			if width == 4 {
				in = binary.BigEndian.AppendUint32(in, uint32(n))
			} else {
				in = binary.BigEndian.AppendUint16(in, uint16(min(n, 0xffff)))
			}
		}
		in = append(in, bytes.Repeat([]byte{0xc0}, pad)...)
		var err error
		got := allocatedBy(func() { _, err = decodeMsgpack(in) })
		if !errors.Is(err, errShortBuffer) {
			t.Errorf("%s: %v, want %v", tc.name, err, errShortBuffer)
		}
		if limit := uint64(64 * len(in)); got > limit {
			t.Errorf("%s: %d bytes of input made the decoder allocate %d bytes (more than %d)", tc.name, len(in), got, limit)
		}
	}
}

// A declared length beyond the input left is refused before anything of
// its size is made, whatever it counts. (On a 64-bit platform these were
// refused already; on a 32-bit one a 32-bit length of 2^31 or more became
// a negative int, and make panicked on it.)
func TestMsgpackDeclaredLengthsRefused(t *testing.T) {
	for _, head := range [][]byte{
		{0xd9, 0xff}, {0xda, 0xff, 0xff}, {0xdb, 0xff, 0xff, 0xff, 0xff}, {0xdb, 0x80, 0, 0, 0}, // str
		{0xc4, 0xff}, {0xc5, 0xff, 0xff}, {0xc6, 0xff, 0xff, 0xff, 0xff}, {0xc6, 0x80, 0, 0, 0}, // bin
		{0xc7, 0xff, 1}, {0xc8, 0xff, 0xff, 1}, {0xc9, 0xff, 0xff, 0xff, 0xff, 1}, {0xc9, 0x80, 0, 0, 0, 1}, // ext
		{0xdc, 0xff, 0xff}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdd, 0x80, 0, 0, 0}, // array
		{0xde, 0xff, 0xff}, {0xdf, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0x80, 0, 0, 0}, // map
		{0x9f}, {0x8f}, {0xbf}, {0xd8, 1}, // fix types
	} {
		in := append(bytes.Clone(head), 1, 2, 3)
		var err error
		got := allocatedBy(func() { _, err = decodeMsgpack(in) })
		if !errors.Is(err, errShortBuffer) {
			t.Errorf("% x: %v, want %v", in, err, errShortBuffer)
		}
		if got > 64<<10 {
			t.Errorf("% x: allocated %d bytes", in, got)
		}
	}
	// a map of 3 pairs needs 6 bytes at least; an array of 6 elements fits
	if _, err := decodeMsgpack([]byte{0xde, 0, 3, 1, 2, 3, 4, 5}); !errors.Is(err, errShortBuffer) {
		t.Errorf("map of 3 pairs in 5 bytes: %v", err)
	}
	if v, err := decodeMsgpack([]byte{0xdc, 0, 6, 1, 2, 3, 4, 5, 6}); err != nil || len(v.([]any)) != 6 {
		t.Errorf("array of 6: %v %v", v, err)
	}
	// uint 32 is unsigned whatever the platform's int
	if v, err := decodeMsgpack([]byte{0xce, 0xff, 0xff, 0xff, 0xff}); err != nil || v != float64(1<<32-1) {
		t.Errorf("uint 32 max: %v %v", v, err)
	}
}
