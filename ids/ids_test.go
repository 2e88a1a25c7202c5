package ids_test

import (
	"fmt"
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
