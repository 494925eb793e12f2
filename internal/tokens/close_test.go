package tokens

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Close ends the Sharer's background work at once: a rotating fetch that
// went on for the fleet after its caller gave up, held at WeChat, and the
// later write of a rotation sent alone, retrying against a Redis that
// stalls (for up to a minute, convergeFor). Before Close, both outlived
// the Transport that closed, and a leak check after it flagged them. The
// bound on Close is far below either's own bound (a minute), so only Close
// ends them within it.
func TestCloseEndsTheBackgroundWork(t *testing.T) {
	wx := newHeldWeChat(t)
	f, s, proxy := withProxiedReplica(t)

	// The fleet's fetch of wxB, under the lease, held at WeChat; its caller
	// gives up, and the fetch goes on detached.
	wx.giveUpOnce(t, f.clients[1], "wxB")

	// wxA sent alone while Redis stalls: its answer's write for the fleet
	// retries in the background.
	proxy.Stall()
	alone := exchangeWith(t, f.clients[1], f.emu.URL, "wxA")
	if st := s.Stats(); st.Unshared != 1 {
		t.Fatalf("stats %+v, want wxA sent alone", st)
	}

	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close: %v, want the background work ended (s.bg done) within its bound", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	if n := wx.issued.Load(); n != 1 {
		t.Fatalf("WeChat got %d fetches of wxB, want the one that was held", n)
	}
	proxy.Resume()
	if got := f.keptToken(t, "wxA"); got == alone {
		t.Fatal("the write of wxA's answer went on after Close")
	}

	// An exchange after Close is still answered: with Redis stalling, sent
	// as it came, on its caller's context, and nothing started after it.
	proxy.Stall()
	if tok := exchangeWith(t, f.clients[1], f.emu.URL, "wxA"); tok == "" || tok == alone {
		t.Fatalf("the exchange after Close answered %q, want a new token", tok)
	}
	proxy.Resume()
	if s.startBackground() {
		s.bg.Done()
		t.Fatal("background work can start after Close")
	}
}

// Close waits for the background work only as long as its context lasts,
// and reports the context's error when that ended first.
func TestCloseReturnsWhenItsContextEnds(t *testing.T) {
	_, s, _ := withProxiedReplica(t)
	if !s.startBackground() { // work that does not end until told
		t.Fatal("no background work can start before Close")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with its context ended and work left: %v, want context.Canceled", err)
	}
	s.bg.Done()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close once the work ended: %v", err)
	}
}
