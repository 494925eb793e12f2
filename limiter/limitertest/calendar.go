package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// testCancelCalendar: CancelCalendar gives back a day's slot and keeps the
// paced slot the request spent; a Cancel after it gives back the paced
// slot alone (the day's is not given back twice); a second CancelCalendar
// does nothing.
func testCancelCalendar(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 2)
	ctx := context.Background()
	// A day's quota of 2 in a zone whose day has hours left, and one call
	// a second.
	daily, err := rule.NewCalendar("daily", 2, rule.Day, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	paced := pacedRule(t, "paced", 1, time.Second, 1)
	req := limiter.Request{Group: Group(t), Rules: []rule.Rule{daily, paced}, MaxWait: 10 * time.Second}
	if time.Until(time.Now().UTC().Truncate(24*time.Hour).Add(24*time.Hour)) < time.Minute {
		t.Skip("within a minute of midnight UTC: the day's quota would reset during the test")
	}

	a := reserve(t, ls[0], req)
	b := reserve(t, ls[1], req)
	if !a.OK() || !b.OK() {
		t.Fatalf("a %+v, b %+v: want both of the day's 2 booked", a, b)
	}
	// The provider refused b, the last booked, without billing it against
	// the day: its day slot comes back, twice asked or not, and its paced
	// slot stays spent (given back, the next request would take it).
	if err := b.CancelCalendar(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.CancelCalendar(ctx); err != nil {
		t.Fatal(err)
	}
	c := reserve(t, ls[1], req)
	if !c.OK() {
		t.Fatalf("after b's day slot came back, c was refused: %+v", c)
	}
	if !c.SendAt().After(b.SendAt()) {
		t.Fatalf("c at %v, b at %v: c must come after b, whose paced slot stays spent", c.SendAt(), b.SendAt())
	}
	// The day is full again: one slot came back, not two.
	if d := reserve(t, ls[0], req); d.OK() {
		t.Fatalf("a fourth request was admitted for a day of 2 after one slot came back: %+v", d)
	}
	// c's Cancel after its CancelCalendar: the paced slot, the last booked,
	// comes back, and the day's is not given back a second time.
	if err := c.CancelCalendar(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	e := reserve(t, ls[0], req)
	if !e.OK() || !e.SendAt().Equal(c.SendAt()) {
		t.Fatalf("after c gave everything back, e is %+v at %v, want c's slot %v", e, e.SendAt(), c.SendAt())
	}
	if f := reserve(t, ls[1], req); f.OK() {
		t.Fatalf("a request past the day's 2 was admitted: c's day slot came back twice (%+v)", f)
	}
}
