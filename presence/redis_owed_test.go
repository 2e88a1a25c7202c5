package presence_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A held-back leave is not told when the other node brought the record
// back (its register notes it, markSpoken) and the user then left
// normally through it. Before, bob's leave of c1 was told twice (a review,
// 2026-12-07).
func TestRedisHeldBackLeaveNotToldAfterNormalLeave(t *testing.T) {
	f, n1, n2 := bobOnTwoNodes(t, "c1", false)
	ctx := context.Background()
	m := f.prefix + ":{c:c1}:m"
	got := f.ticksEvery(t, 30*time.Second, 12, func() bool { return f.rdb.HExists(ctx, m, "bob").Val() }, n1, n2)
	if !f.rdb.HExists(ctx, m, "bob").Val() {
		t.Fatalf("n2 never brought bob's record back; events %q", got)
	}
	if err := n2.Leave(ctx, "b2", "c1"); err != nil {
		t.Fatal(err)
	}
	got = append(got, f.rec.Take()...)
	got = append(got, f.ticksEvery(t, 30*time.Second, 14, nil, n1, n2)...)
	n := 0
	for _, ev := range got {
		if strings.HasPrefix(ev, "leave c1 bob") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("events %q: bob's leave of c1 told %d times, want once", got, n)
	}
}
