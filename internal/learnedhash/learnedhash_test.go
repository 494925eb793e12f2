package learnedhash

import (
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
)

// FuzzParse: a stored learned limit is read from Redis, where anything may
// be written; it is either refused or a limit that can only lower a rule,
// and one accepted is written back as it was read.
func FuzzParse(f *testing.F) {
	f.Add("s GET /open-apis/contact/v3/users/:user_id", "10:1795670375557")
	f.Add("day@wx1 /cgi-bin/message/custom/send", "5000:1795670375557")
	f.Add("m POST /x", "100:0")
	f.Add("", ":")
	f.Add("toolongwindow GET /x", "10:1")
	f.Fuzz(func(t *testing.T, field, v string) {
		l, ok := Parse(field, v)
		if !ok {
			return
		}
		if l.Limit <= 0 || l.Window == "" || len(l.Window) > 8 || l.API == "" || len(l.App) > 64 || len(field) > MaxField {
			t.Fatalf("Parse(%q, %q) = %+v, accepted", field, v, l)
		}
		if again, ok := Parse(Field(l), Value(l)); !ok || again != l {
			t.Fatalf("Parse(%q, %q) = %+v; written back and read again: %+v, %v", field, v, l, again, ok)
		}
	})
}

// A limit is in force from now until Until, and not when it lapses further
// ahead than any replica writes one (planted).
func TestInForce(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		until time.Time
		want  bool
	}{
		{now.Add(time.Hour), true},
		{now.Add(MaxAhead), true},
		{now, false},
		{now.Add(MaxAhead + time.Millisecond), false},
	} {
		if got := InForce(providers.Learned{Until: c.until}, now); got != c.want {
			t.Errorf("InForce(until now+%v) = %v, want %v", c.until.Sub(now), got, c.want)
		}
	}
}
