// Package fuzzinput reads fuzz input as a small program from which tests
// build values: each byte of B picks a kind, a length or a piece of a
// number, strings are cut from S, and X is a float the fuzzer chooses.
package fuzzinput

// Program is one fuzz input; its methods consume B.
type Program struct {
	B []byte
	S string
	X float64
}

// Next consumes a byte of B, or gives 0 once B is used up.
func (p *Program) Next() byte {
	if len(p.B) == 0 {
		return 0
	}
	c := p.B[0]
	p.B = p.B[1:]
	return c
}

// U64 is the next 8 bytes of B, big-endian.
func (p *Program) U64() uint64 {
	var u uint64
	for range 8 {
		u = u<<8 | uint64(p.Next())
	}
	return u
}

// Str is a piece of S picked by the next 2 bytes ("" without consuming
// any when S is empty).
func (p *Program) Str() string {
	if p.S == "" {
		return ""
	}
	i := int(p.Next()) % len(p.S)
	j := i + int(p.Next())%(len(p.S)-i+1)
	return p.S[i:j]
}
