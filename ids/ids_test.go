package ids_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/presenced/presenced/ids"
)

func TestValid(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"", false},
		{"a", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"user:1@x.y-z_", true},
		{"ABCxyz0189", true},
		{"a/b", false},
		{"a b", false},
		{"a\n", false},
		{"\na", false},
		{"é", false},
		{"a+b", false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%q", tt.id)
		if len(tt.id) > 20 {
			name = fmt.Sprintf("%d chars", len(tt.id))
		}
		t.Run(name, func(t *testing.T) {
			if got, want := ids.Valid(tt.id), tt.want; got != want {
				t.Errorf("Valid(%q) = %v, want %v", tt.id, got, want)
			}
		})
	}
}

func TestUniqueAndSorted(t *testing.T) {
	tests := []struct {
		in             []string
		unique, sorted []string
	}{
		{nil, []string{}, []string{}},
		{[]string{"b", "a", "b", "c", "a"}, []string{"b", "a", "c"}, []string{"a", "b", "c"}},
		// past the scan, through the map; twice, so that the second call
		// gets the first's set again and must find it empty
		{strings.Split("q w e r t y u i o p a s d f g h j q w e", " "),
			strings.Split("q w e r t y u i o p a s d f g h j", " "),
			strings.Split("a d e f g h i j o p q r s t u w y", " ")},
		{strings.Split("q w e r t y u i o p a s d f g h j q w e", " "),
			strings.Split("q w e r t y u i o p a s d f g h j", " "),
			strings.Split("a d e f g h i j o p q r s t u w y", " ")},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.in)
		if got := ids.Unique(in); got == nil || !slices.Equal(got, tt.unique) {
			t.Errorf("Unique(%q) = %q, want %q", tt.in, got, tt.unique)
		}
		if got := ids.Sorted(in); got == nil || !slices.Equal(got, tt.sorted) {
			t.Errorf("Sorted(%q) = %q, want %q", tt.in, got, tt.sorted)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("the input was changed: %q, want %q", in, tt.in)
		}
	}
}

func TestClip(t *testing.T) {
	if got := ids.Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	if got, want := ids.Clip(strings.Repeat("x", 41)), strings.Repeat("x", 40)+"…"; got != want {
		t.Errorf("Clip(41 x) = %q, want %q", got, want)
	}
}

// rule is the contract's id rule as a regular expression: the oracle for
// Valid's table.
var rule = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)

func FuzzValid(f *testing.F) {
	for _, s := range []string{"", "a", "user:1@x.y-z_", "a/b", "é", "a\x00", strings.Repeat("z", 128), strings.Repeat("z", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ids.Valid(s), rule.MatchString(s); got != want {
			t.Fatalf("Valid(%q) = %v, the rule says %v", s, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	id := "user:1234567890@example-team.a_b"
	for b.Loop() {
		if !ids.Valid(id) {
			b.Fatal("invalid")
		}
	}
}
