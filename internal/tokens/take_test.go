package tokens

import (
	"context"
	"io"
	"strings"
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

// A take whose reply is lost while another replica holds the lease (its
// fetch in flight) waits for that fetch, as a take answered "held" does,
// and is answered its token. Before, the read-back that found another's
// lease sent the exchange alone: for WeChat a second rotation while the
// other replica's fetch was in flight, one of the two tokens handed out
// retired by the other.
func TestTakeWhoseReplyIsLostWaitsForAnothersLease(t *testing.T) {
	wx := newHeldWeChat(t)
	f, s, proxy := withProxiedReplica(t)
	// Replica 0 fetches wxA for the fleet, held at WeChat: it holds the
	// lease (its Redis is not proxied, its renewals go through).
	first := make(chan string, 1)
	go func() {
		resp, err := f.clients[0].Get(wx.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret)
		if err != nil {
			t.Error(err)
			first <- ""
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		first <- string(b)
	}()
	<-wx.arrived
	proxy.HoldRepliesAfter([]byte("ARGV[3] == '1'")) // takeLua's text: replica 1's take's reply alone is held
	second := make(chan string, 1)
	go func() {
		resp, err := f.clients[1].Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret)
		if err != nil {
			t.Error(err)
			second <- ""
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		second <- string(b)
	}()
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Waited < 1; {
		select {
		case body := <-second:
			t.Fatalf("replica 1 answered %s before replica 0's fetch did (stats %+v): sent alone", body, s.Stats())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: replica 1 did not wait for replica 0's fetch", s.Stats())
		}
		time.Sleep(time.Millisecond) // polls the counts
	}
	proxy.Resume()
	wx.answer()
	a, b := <-first, <-second
	if !strings.Contains(a, "TOKEN-0001") || !strings.Contains(b, "TOKEN-0001") {
		t.Fatalf("replica 0 got %s, replica 1 got %s; want both the token fetched once", a, b)
	}
	if st := s.Stats(); st.Unshared != 0 || st.Shared != 1 {
		t.Fatalf("replica 1: %+v, want its exchange shared, nothing sent alone", st)
	}
	if n, m := wx.issued.Load(), f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 || m != 0 {
		t.Fatalf("%d fetches at the held WeChat and %d at the other, want 1 and 0", n, m)
	}
}
