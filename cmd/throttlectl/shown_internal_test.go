package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"
)

// A value planted in Redis reaches the operator's terminal escaped: a
// penalty code holding a carriage return and cursor controls used to
// redraw the status over the penalty ("penalties: none").
func TestStatusEscapesControlCharacters(t *testing.T) {
	planted := "x\r\x1b[1A\x1b[2K  penalties: none"
	st := inspect.State{Prefix: "throttle", Now: time.Now(), Groups: []inspect.GroupState{{
		Group:     "dingtalk\x1b[8m",
		Penalties: []inspect.PenaltyState{{Scope: "egress:default", Code: planted, SetBy: "r\x07", Until: time.Now().Add(time.Minute), Left: time.Minute}},
	}}}
	var out strings.Builder
	render(&out, st, nil)
	if strings.ContainsAny(out.String(), "\r\x1b\x07") {
		t.Fatalf("control characters reach the terminal:\n%q", out.String())
	}
	if !strings.Contains(out.String(), strconv.Quote(planted)) {
		t.Fatalf("the planted code is not shown quoted:\n%s", out.String())
	}
	if got := describe(st.Groups[0].Penalties[0]); strings.ContainsAny(got, "\r\x1b\x07") {
		t.Fatalf("describe: %q", got)
	}
	for _, s := range []string{"a\u202eb", "a\u200bb", "a\u2028b"} { // a bidi override, a zero-width space, a line separator
		if got := shown(s); got != strconv.Quote(s) {
			t.Errorf("shown(%q) = %q, want it quoted", s, got)
		}
	}
	if got := shown("钉钉 org:1"); got != "钉钉 org:1" {
		t.Errorf("shown of a printable name = %q, want it as it is", got)
	}
}
