package limiter

import (
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// Any reply to the reserve script parses without a panic, whatever a
// garbled or hostile Redis sends: an admission carries one booked state per
// rule, a refusal none or one per rule (what the fleet booked), and a wait
// is never negative.
func FuzzParseReserve(f *testing.F) {
	for _, seed := range []string{
		"1767225600 123456\n0 0 0 1767225600173456",
		"1767225600 123456 e1767225000000000\n1 50000 1 1767225600173456",
		"1767225600 123456 c\n1 50000 2 1767225600173456 0",
		"1767225600 123456\n1 50000 1",
		"1767225600 123456\n2 1000 1 1767225601123456|90018",
		"1767225600 123456 e1767225000000000\n2 1000 1 22 1767225601123456|9\n0018\n0 0 0 5",
		"1767225600 123456\n0 20 1 5\n1 70 1 9",
		"1767225600 123456\n1 5 1 x", "1767225600 123456\n1 5 1 1 2 3", "1 2\n", "", "x y\n0 0 0", "1 2\n0 -5 0", "1 2\n1 -5 1",
	} {
		f.Add(seed, uint8(1), uint8(1))
	}
	r1 := rule.Must(rule.New("a", 20, time.Second))
	r2 := rule.Must(rule.NewWindow("b", 5, time.Minute))
	f.Fuzz(func(t *testing.T, reply string, nreq, nrules uint8) {
		rules := []rule.Rule{r1, r2}[:nrules%3]
		reqs := make([]Request, nreq%3+1)
		for i := range reqs {
			reqs[i] = Request{Group: "g", Rules: rules, Scopes: []string{"s"}}
		}
		// The same reply read as a segment's and as a lean call's (lean.go).
		for _, parse := range []func([]Request, string, []Reservation) (replyFlags, error){parseReserve, parseLean} {
			out := make([]Reservation, len(reqs))
			if _, err := parse(reqs, reply, out); err == nil {
				checkParsed(t, out, len(rules))
			}
		}
	})
}

// checkParsed holds answers read from a reply to what their requests, of
// rules rules each, can be given.
func checkParsed(t *testing.T, out []Reservation, rules int) {
	t.Helper()
	for _, res := range out {
		if res.ok && len(res.booked) != rules {
			t.Fatalf("admitted with %d booked states for %d rules", len(res.booked), rules)
		}
		var buf [4]int64
		if st := res.states(buf[:0], rules); !res.ok && res.fleet != "" && rules > 0 && len(st) != rules {
			t.Fatalf("refused with fleet states %q that do not read as %d rules'", res.fleet, rules)
		}
		if res.delay < 0 || res.retryAfter < 0 {
			t.Fatalf("negative wait: %v %v", res.delay, res.retryAfter)
		}
	}
}
