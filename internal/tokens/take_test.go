package tokens

import (
	"context"
	"testing"
	"time"
)

// A take of the lease whose reply comes after its bound (250 ms) has set
// the lease all the same: read back, the lease is this exchange's, which
// fetches for the fleet as its holder and lets it go after. Before, the
// exchange was sent alone and the lease left held: every other replica's
// exchange of the credential waited it out (3 s) and then fetched again,
// rotating away the token just handed out.
func TestTakeWhoseReplyIsLateGoesOnAsHolder(t *testing.T) {
	f, s, proxy := withProxiedReplica(t)
	lock := f.prefix + ":token:" + f.keys(t, "wxA").name + ":lock"
	proxy.HoldRepliesAfter([]byte("ARGV[3] == '1'")) // takeLua's text: the take's reply alone is held
	tok := exchangeWith(t, f.clients[1], f.emu.URL, "wxA")
	proxy.Resume()
	if st := s.Stats(); st.Fetched != 1 || st.Unshared != 0 {
		t.Fatalf("stats %+v, want the exchange fetched for the fleet as the lease's holder", st)
	}
	if n := f.rdb.Exists(context.Background(), lock).Val(); n != 0 {
		t.Fatalf("the lease is still held after the fetch (PTTL %v)", f.rdb.PTTL(context.Background(), lock).Val())
	}
	if got := f.fetch(t, 0, "wxA").AccessToken; got != tok {
		t.Fatalf("replica 0's exchange answered %q, want the token fetched", got)
	}
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 {
		t.Fatalf("%d fetches at WeChat, want 1", n)
	}
}

// A take whose reply does not come, nor the reading back of the lease, is
// sent alone, and the lease it may have set is let go by compare-and-delete
// (its reply lost too): the lease here outlives any wait of the test, so
// only that release ends it.
func TestTakeWhoseReplyIsLostLetsTheLeaseGo(t *testing.T) {
	f, s, proxy := withProxiedReplica(t)
	s.lease = time.Minute // as WithLease(time.Minute): left set, it would hold the others a minute
	lock := f.prefix + ":token:" + f.keys(t, "wxA").name + ":lock"
	proxy.HoldRepliesAfter([]byte(lock)) // every call naming the lease: Redis runs it, its reply is held
	exchangeWith(t, f.clients[1], f.emu.URL, "wxA")
	if st := s.Stats(); st.Unshared != 1 {
		t.Fatalf("stats %+v, want the exchange sent alone", st)
	}
	// Redis ran the release before its reply was held; waited for on
	// Redis's side, not on the clock.
	for deadline := time.Now().Add(10 * time.Second); f.rdb.Exists(context.Background(), lock).Val() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the lease the take set is still held (PTTL %v), want it let go", f.rdb.PTTL(context.Background(), lock).Val())
		}
		time.Sleep(5 * time.Millisecond) // polls Redis
	}
	proxy.Resume()
}
