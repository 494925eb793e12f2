package emulator

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 10, 8, 0, 0, 0, time.UTC)

func newCore(clk *ManualClock, scale float64) *Core[string] {
	return New[string](Config{
		Clock:     clk.Now,
		TimeScale: scale,
		TokenName: func(seq int, owner string) string { return fmt.Sprintf("%d-%s", seq, owner) },
	})
}

func TestTimes(t *testing.T) {
	clk := NewManualClock(t0)
	c := newCore(clk, 1000)
	clk.Add(60 * time.Millisecond)
	wall, emu := c.Times()
	if !wall.Equal(t0.Add(60*time.Millisecond)) || !emu.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Times() = %v, %v; want 60 ms and 1 min after the origin", wall, emu)
	}
	if c := newCore(clk, 0); !c.Now().Equal(clk.Now()) {
		t.Fatalf("scale 0: Now() = %v, want the clock's %v", c.Now(), clk.Now())
	}
}

func TestTokens(t *testing.T) {
	clk := NewManualClock(t0)
	c := newCore(clk, 1)
	if c.TokenTTL() != DefaultTokenTTL {
		t.Fatalf("TokenTTL() = %v, want the default", c.TokenTTL())
	}
	tok := c.Token("app")
	if tok != "1-app" {
		t.Fatalf("Token() = %q, want the name TokenName gives", tok)
	}
	tests := []struct {
		tok   string
		at    time.Time
		owner string
		st    TokenState
	}{
		{"", t0, "", TokenMissing},
		{"2-app", t0, "", TokenUnknown},
		{tok, t0.Add(DefaultTokenTTL - 1), "app", TokenValid},
		{tok, t0.Add(DefaultTokenTTL), "app", TokenExpired},
	}
	for _, tc := range tests {
		if owner, st := c.CheckLocked(tc.tok, tc.at); owner != tc.owner || st != tc.st {
			t.Errorf("CheckLocked(%q, %v) = %q, %v; want %q, %v", tc.tok, tc.at, owner, st, tc.owner, tc.st)
		}
	}
}

func TestFaults(t *testing.T) {
	var q Faults[int]
	q.Add(2, 7)
	q.Add(0, 8)
	q.Add(1, 9)
	var got []int
	for f, ok := q.Next(); ok; f, ok = q.Next() {
		got = append(got, f)
	}
	if fmt.Sprint(got) != "[7 7 9]" {
		t.Fatalf("the queue gave %v, want [7 7 9]", got)
	}
}

func TestRecord(t *testing.T) {
	c := newCore(NewManualClock(t0), 1)
	c.Lock()
	c.RecordLocked("a", 0)
	c.RecordLocked("b", 45009)
	c.RecordLocked("c", 45009)
	c.Unlock()
	reqs, n := c.Requests(), c.Counters()
	reqs[0] = "changed"
	n.ByCode[45009] = 0
	if got := c.Requests(); fmt.Sprint(got) != "[a b c]" {
		t.Errorf("Requests() = %v after changing a copy", got)
	}
	if got := c.Counters(); got.Total != 3 || got.OK != 1 || got.ByCode[45009] != 2 {
		t.Errorf("Counters() = %+v after changing a copy", got)
	}
}

func TestCodes(t *testing.T) {
	tests := []struct {
		body          string
		errcode, code int
	}{
		{`{"errcode":45009,"errmsg":"x"}`, 45009, 0},
		{`{"code":99991400,"msg":"x"}`, 0, 99991400},
		{`{"errcode":"-1"}`, -1, 0},
		{`<html>`, 0, 0},
	}
	for _, tc := range tests {
		if got := Errcode(tc.body); got != tc.errcode {
			t.Errorf("Errcode(%s) = %d, want %d", tc.body, got, tc.errcode)
		}
		if got := Code(tc.body); got != tc.code {
			t.Errorf("Code(%s) = %d, want %d", tc.body, got, tc.code)
		}
	}
}

// A second exchange of a key gets the same token while more than
// renewBelow of it remains, a new one below that; a revoked token is
// unknown (its owner still named) and the next exchange gets a new one.
func TestReuseAndRevoke(t *testing.T) {
	clock := NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New[string](Config{Clock: clock.Now, TokenTTL: 2 * time.Hour,
		TokenName: func(seq int, owner string) string { return owner + "-" + strconv.Itoa(seq) }})
	c.Lock()
	first, left := c.ReuseLocked("k", "app", clock.Now(), 30*time.Minute)
	again, _ := c.ReuseLocked("k", "app", clock.Now().Add(time.Hour), 30*time.Minute)
	renewed, _ := c.ReuseLocked("k", "app", clock.Now().Add(100*time.Minute), 30*time.Minute)
	c.Unlock()
	if left != 7200 || again != first || renewed == first {
		t.Fatalf("tokens %q (%d s), %q, %q: want the same token within the hour, a new one in its last 30 minutes", first, left, again, renewed)
	}
	c.Revoke(renewed)
	c.Lock()
	defer c.Unlock()
	if owner, st := c.CheckLocked(renewed, clock.Now()); st != TokenUnknown || owner != "app" {
		t.Fatalf("revoked token: %q %v, want app, unknown", owner, st)
	}
	if owner, st := c.CheckLocked(first, clock.Now()); st != TokenValid || owner != "app" {
		t.Fatalf("the earlier token: %q %v, want app, valid", owner, st)
	}
	if next, _ := c.ReuseLocked("k", "app", clock.Now(), 30*time.Minute); next == renewed {
		t.Fatal("an exchange after a revocation got the revoked token")
	}
}
