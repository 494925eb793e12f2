package tokens

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// A lease no exchange could have set, without an end or with more time
// left than any lease is given (a key planted by anyone who can write to
// the Redis, or left by a bug), is deleted rather than waited on: it held
// every exchange of the credential, on every replica, until its caller gave
// up (for ever without a deadline).
func TestPlantedLeaseIsNotWaitedOn(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Hour} {
		f := newFleet(t, 1)
		s := f.sharers[0]
		ctx := context.Background()
		tokenURL := f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret
		req, _ := http.NewRequest(http.MethodGet, tokenURL, nil)
		p, _ := s.prepare(req, exchangeFor("GET", "/cgi-bin/token"))
		lock := p.key + ":lock"

		// A deadline, so that a wait fails the test rather than hangs it.
		bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		f.rdb.Set(ctx, lock, "planted", ttl)
		if resp, sent, err := s.Stored(req.WithContext(bounded), "wechat"); resp != nil || sent == nil || err != nil {
			t.Fatalf("ttl %v: Stored with a planted lease: %v %v, want the request sent on", ttl, resp, err)
		}
		if n := f.rdb.Exists(ctx, lock).Val(); n != 0 {
			t.Fatalf("ttl %v: the planted lease is still there", ttl)
		}
		f.rdb.Set(ctx, lock, "planted", ttl)
		get, _ := http.NewRequestWithContext(bounded, http.MethodGet, tokenURL, nil)
		resp, err := f.clients[0].Do(get)
		if err != nil {
			t.Fatalf("ttl %v: the exchange with a planted lease: %v", ttl, err)
		}
		resp.Body.Close()
		if st := s.Stats(); st.Waited != 0 || st.Fetched != 1 {
			t.Fatalf("ttl %v: stats %+v, want one fetch and no wait", ttl, st)
		}
	}
}

// WithMaxWait bounds the wait for another replica's fetch, which a slow
// provider can stretch to its lease's longest hold (a minute): past it the
// exchange fails with a *WaitError and sends nothing, in Stored (before the
// limiter) and in the exchange sent on, whose wait counts from Stored's.
func TestWaitBoundedByMaxWait(t *testing.T) {
	const maxWait = 150 * time.Millisecond
	f := newFleet(t, 1, WithMaxWait(maxWait))
	s := f.sharers[0]
	ctx := context.Background()
	tokenURL := f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret
	req, _ := http.NewRequest(http.MethodGet, tokenURL, nil)
	p, _ := s.prepare(req, exchangeFor("GET", "/cgi-bin/token"))
	f.rdb.Set(ctx, p.key+":lock", "another replica, slow", time.Minute)

	// A deadline, so that an unbounded wait fails the test rather than
	// hangs it.
	bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err := s.Stored(req.WithContext(bounded), "wechat")
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, ErrWaitedTooLong) {
		t.Fatalf("Stored behind a slow fetch: %v, want a *WaitError", err)
	}
	if took := time.Since(start); took < maxWait || we.Waited < maxWait || we.MaxWait != maxWait {
		t.Fatalf("failed after %v (%+v), want after at least %v", took, we, maxWait)
	}

	// The exchange sent on after Stored waited part of the budget gets
	// only what is left of it.
	f.rdb.Del(ctx, p.key+":lock")
	sent := req.WithContext(context.WithValue(BudgetFrom(bounded, time.Now().Add(-maxWait)), waitedKey{}, true))
	f.rdb.Set(ctx, p.key+":lock", "another replica, slow", time.Minute)
	if _, err := s.Wrap(http.DefaultTransport).RoundTrip(sent); !errors.Is(err, ErrWaitedTooLong) {
		t.Fatalf("the exchange sent on: %v, want ErrWaitedTooLong at once", err)
	}
	if st := s.Stats(); st.Waited != 1 || st.Fetched != 0 {
		t.Fatalf("stats %+v, want one wait counted and nothing fetched", st)
	}

	// A request whose budget began before it came here (BudgetFrom: it
	// waited for its limiter's slot) gets only what is left: the wait
	// counts from the budget's start, not from its own.
	budgeted := req.WithContext(BudgetFrom(bounded, time.Now().Add(-time.Hour)))
	if _, err := s.Wrap(http.DefaultTransport).RoundTrip(budgeted); !errors.As(err, &we) || we.Waited < time.Hour {
		t.Fatalf("an exchange whose budget began an hour ago: %v, want a *WaitError counting the hour", err)
	}
	if reqs := f.emu.Requests(); len(reqs) != 0 {
		t.Fatalf("%d requests reached the provider, want 0", len(reqs))
	}
}

// WatchSent's flag tells the Transport when an exchange it admitted sent
// nothing, so that the slot goes back: answered from Redis (another
// replica's fetch ended meanwhile) or given up waiting; not when it was
// sent to the provider.
func TestWatchSentTellsAnExchangeThatSentNothing(t *testing.T) {
	f := newFleet(t, 1, WithMaxWait(50*time.Millisecond))
	s := f.sharers[0]
	ctx := context.Background()
	tokenURL := f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret
	rt := s.Wrap(http.DefaultTransport)
	exchange := func() (bool, error) {
		wctx, unsent := WatchSent(ctx)
		req, _ := http.NewRequestWithContext(wctx, http.MethodGet, tokenURL, nil)
		if !IsExchange(req) {
			t.Fatal("a token exchange not told as one")
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return unsent.Load(), err
	}
	if unsent, err := exchange(); unsent || err != nil {
		t.Fatalf("the first exchange, fetched: unsent %v, err %v", unsent, err)
	}
	if unsent, err := exchange(); !unsent || err != nil {
		t.Fatalf("answered from Redis: unsent %v, err %v", unsent, err)
	}
	req, _ := http.NewRequest(http.MethodGet, tokenURL, nil)
	p, _ := s.prepare(req, exchangeFor("GET", "/cgi-bin/token"))
	f.rdb.Del(ctx, p.key)
	f.rdb.Set(ctx, p.key+":lock", "another replica, slow", time.Minute)
	if unsent, err := exchange(); !unsent || !errors.Is(err, ErrWaitedTooLong) {
		t.Fatalf("given up waiting: unsent %v, err %v", unsent, err)
	}
	other, _ := http.NewRequest(http.MethodGet, f.emu.URL+"/cgi-bin/user/info", nil)
	if IsExchange(other) {
		t.Fatal("an API call told as an exchange")
	}
}
