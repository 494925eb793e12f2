package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/inspect"
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
}
