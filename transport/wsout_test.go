package transport

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Every length takes the shortest header form (RFC 6455 §5.2), and
// sealFrame builds in place the frame buildFrame builds anew.
func TestFrameHeaders(t *testing.T) {
	for _, tc := range []struct {
		n      int
		header int
	}{{0, 2}, {1, 2}, {125, 2}, {126, 4}, {65535, 4}, {65536, 10}, {1 << 20, 10}} {
		payload := bytes.Repeat([]byte{'z'}, tc.n)
		f := buildFrame(opText, nil, payload)
		if len(f) != tc.header+tc.n {
			t.Fatalf("%d bytes: frame of %d, want header %d", tc.n, len(f), tc.header)
		}
		if f[0] != 0x81 {
			t.Fatalf("%d bytes: first byte %#x, want FIN and text", tc.n, f[0])
		}
		var got int
		switch l := int(f[1]); {
		case l < 126:
			got = l
		case l == 126:
			got = int(binary.BigEndian.Uint16(f[2:4]))
		default:
			if f[2]&0x80 != 0 {
				t.Fatalf("%d bytes: 64-bit length with its top bit set", tc.n)
			}
			got = int(binary.BigEndian.Uint64(f[2:10]))
		}
		if got != tc.n || !bytes.Equal(f[tc.header:], payload) {
			t.Fatalf("%d bytes: header says %d", tc.n, got)
		}
		buf := append(make([]byte, maxFrameHeader), payload...)
		if sealed := sealFrame(buf, opText); !bytes.Equal(sealed, f) {
			t.Fatalf("%d bytes: sealFrame differs from buildFrame", tc.n)
		}
	}
	if f := buildFrame(opBinary, []byte{'4'}, []byte("ab")); !bytes.Equal(f, []byte{0x82, 3, '4', 'a', 'b'}) {
		t.Fatalf("binary frame with a prefix: %v", f)
	}
}
