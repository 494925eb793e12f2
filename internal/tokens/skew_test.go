package tokens

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// addReplica adds a replica to f with its own Sharer over base.
func (f *fleet) addReplica(t *testing.T, base http.RoundTripper, opts ...Option) {
	t.Helper()
	s, err := New(f.rdb, append([]Option{WithPrefix(f.prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.sharers = append(f.sharers, s)
	f.clients = append(f.clients, &http.Client{Transport: s.Wrap(base)})
}

// A replica whose clock is behind the fetcher's takes the kept answer: it
// used to read it as younger than fetched, refuse it and fetch again, and
// WeChat's /cgi-bin/token invalidates the fleet's token at each fetch.
func TestClockBehindTheFetchersShares(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Second, time.Hour} {
		f := newFleet(t, 1, WithClock(func() time.Time { return time.Now().Add(skew) }))
		f.addReplica(t, http.DefaultTransport)
		a, b := f.fetch(t, 0, "wxA"), f.fetch(t, 1, "wxA")
		if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 || a.AccessToken != b.AccessToken {
			t.Fatalf("fetcher's clock %v ahead: %d fetches at the provider, want 1 (same token: %v)", skew, n, a.AccessToken == b.AccessToken)
		}
		if b.ExpiresIn != a.ExpiresIn {
			t.Fatalf("fetcher's clock %v ahead: the answer shared says %d s, want %d", skew, b.ExpiresIn, a.ExpiresIn)
		}
	}
}

// gatedTransport holds each request until released, telling when one has
// arrived.
type gatedTransport struct {
	arrived chan struct{}
	release chan struct{}
	base    http.RoundTripper
}

func (g *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g.arrived <- struct{}{}
	<-g.release
	return g.base.RoundTrip(req)
}

// A provider that answers slower than the lease: the fetcher keeps its
// lease while it waits, so the others wait for its answer rather than
// fetch too, and the answer is kept (its Redis write used to run under a
// timeout started before the fetch, and was dropped).
func TestSlowFetchKeepsLeaseAndAnswer(t *testing.T) {
	const lease = 100 * time.Millisecond
	f := newFleet(t, 0)
	gate := &gatedTransport{arrived: make(chan struct{}, 1), release: make(chan struct{}), base: http.DefaultTransport}
	f.addReplica(t, gate, WithLease(lease))
	f.addReplica(t, http.DefaultTransport, WithLease(lease))
	first := make(chan tokenAnswer, 1)
	// Deferred sends: a failed fetch (t.Fatal ends its goroutine) still
	// answers the test.
	go func() {
		var a tokenAnswer
		defer func() { first <- a }()
		a = f.fetch(t, 0, "wxA")
	}()
	<-gate.arrived
	var waited atomic.Bool
	second := make(chan tokenAnswer, 1)
	go func() {
		var a tokenAnswer
		defer func() { waited.Store(true); second <- a }()
		a = f.fetch(t, 1, "wxA")
	}()
	// Several leases pass while the provider has not answered: the time
	// itself is what is tested.
	time.Sleep(5 * lease)
	if waited.Load() {
		t.Fatal("the second replica did not wait for the slow fetch")
	}
	close(gate.release)
	a, b := <-first, <-second
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 || a.AccessToken != b.AccessToken {
		t.Fatalf("a fetch slower than the lease: %d fetches at the provider, want 1 (same token: %v)", n, a.AccessToken == b.AccessToken)
	}
	if st := f.sharers[0].Stats(); st.Fetched != 1 || st.Unshared != 0 {
		t.Fatalf("fetcher's stats %+v, want its answer kept", st)
	}
	// Later exchanges, on any replica, share it.
	if c := f.fetch(t, 1, "wxA"); c.AccessToken != a.AccessToken {
		t.Fatal("a later exchange fetched again")
	}
}

// A kept answer is handed out only while at least DefaultMargin (30
// minutes) of a 2-hour token is left: SDKs cache a token for what they are
// told less up to 25 minutes of their own (silenceper/wechat 1,500 s), and
// told less than that, silenceper cached it for no time and failed every
// call. Past it, the next exchange fetches anew, and that answer is shared.
func TestKeptAnswerHandedOutWithAtLeastTheMargin(t *testing.T) {
	var offset atomic.Int64
	f := newFleet(t, 1)
	f.addReplica(t, http.DefaultTransport, WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
	first := f.fetch(t, 0, "wxA")
	for _, age := range []time.Duration{0, 5390 * time.Second} {
		offset.Store(int64(age))
		got := f.fetch(t, 1, "wxA")
		if got.AccessToken != first.AccessToken || got.ExpiresIn < int64(DefaultMargin/time.Second) {
			t.Fatalf("kept answer %v old: handed out with %d s (same token: %v), want the kept token with at least %v",
				age, got.ExpiresIn, got.AccessToken == first.AccessToken, DefaultMargin)
		}
	}
	offset.Store(int64(5410 * time.Second))
	renewed := f.fetch(t, 1, "wxA")
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 2 || renewed.AccessToken == first.AccessToken || renewed.ExpiresIn != first.ExpiresIn {
		t.Fatalf("kept answer 5410 s old: %d fetches, answer of %d s (a new token: %v); want a second fetch, its whole lifetime",
			n, renewed.ExpiresIn, renewed.AccessToken != first.AccessToken)
	}
	if again := f.fetch(t, 1, "wxA"); again.AccessToken != renewed.AccessToken || f.emu.Fetches("wxA", "/cgi-bin/token") != 2 {
		t.Fatal("the renewed answer is not shared")
	}
}

// What is left of a kept token is bounded by its key's expiry on Redis's
// clock (the margin before the token's end), whatever the reader's clock
// says: a reader an hour behind the fetcher read the answer as an hour
// younger and told an SDK 4,400 s of a token with 800 s left. Here the
// key is made to expire 10 s from now, as an answer fetched 5,390 s ago
// (by Redis's clock) would, while the reader's clock calls it new.
func TestKeptAnswerLifetimeBoundedByRedisClock(t *testing.T) {
	f := newFleet(t, 2)
	first := f.fetch(t, 0, "wxA")
	key := f.prefix + ":token:" + f.keys(t, "wxA").name
	if err := f.rdb.PExpire(context.Background(), key, 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	got := f.fetch(t, 1, "wxA")
	if got.AccessToken != first.AccessToken || got.ExpiresIn > 1810 || got.ExpiresIn < 1800 {
		t.Fatalf("handed out with %d s (same token: %v), want what Redis says is left: 1,800-1,810 s",
			got.ExpiresIn, got.AccessToken == first.AccessToken)
	}
}

// A Redis user that may not PTTL (enough for sharing before its bound was
// read) still shares: the bound is then unknown, the reader's clock alone
// counts.
func TestSharingWithoutPTTL(t *testing.T) {
	f := newFleet(t, 1)
	ctx := context.Background()
	if err := f.rdb.Do(ctx, "ACL", "SETUSER", "nopttl", "on", ">pw", "~*", "&*", "+@all", "-pttl").Err(); err != nil {
		t.Fatal(err)
	}
	opt := *f.rdb.Options()
	opt.Username, opt.Password = "nopttl", "pw"
	limited := redis.NewClient(&opt)
	t.Cleanup(func() { limited.Close() })
	s, err := New(limited, WithPrefix(f.prefix))
	if err != nil {
		t.Fatal(err)
	}
	f.sharers = append(f.sharers, s)
	f.clients = append(f.clients, &http.Client{Transport: s.Wrap(http.DefaultTransport)})
	first, second := f.fetch(t, 0, "wxA"), f.fetch(t, 1, "wxA")
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 || second.AccessToken != first.AccessToken {
		t.Fatalf("%d fetches at the provider (same token: %v), want the kept answer shared", n, second.AccessToken == first.AccessToken)
	}
}
