package tokens

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
)

// Exchanges waiting for a fetch whose answer cannot be kept (here a wrong
// secret's error) then go to the provider together, not one lease after
// another: the crowd used to fetch one at a time, a round trip each, and
// the last of it was told its wait ran out instead of the provider's
// answer. The provider here holds each exchange after the first until all
// the others are in flight too, which only exchanges sent together reach.
func TestUnkeptAnswerLetsTheWaitersGoTogether(t *testing.T) {
	s, err := New(redistest.Start(t).Client(t), WithPrefix("unkept"))
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	var calls, inFlight, most atomic.Int32
	firstIn := make(chan struct{})
	firstOut := make(chan struct{})
	together := make(chan struct{})
	var once sync.Once
	base := roundTrip(func(req *http.Request) (*http.Response, error) {
		n := calls.Add(1)
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		if n == 1 {
			close(firstIn)
			<-firstOut // the waiters are waiting for this fetch
		} else {
			if cur == waiters {
				once.Do(func() { close(together) })
			}
			select {
			case <-together:
			case <-time.After(10 * time.Second):
			}
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"errcode":40001,"errmsg":"invalid credential"}`)), Request: req}, nil
	})
	client := &http.Client{Transport: s.Wrap(base)}
	get := func() error {
		resp, err := client.Get("https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=wrong")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "40001") {
			t.Errorf("answer %s, want the provider's", b)
		}
		return nil
	}
	errs := make(chan error, waiters+1)
	go func() { errs <- get() }()
	<-firstIn
	for range waiters {
		go func() { errs <- get() }()
	}
	// The waiters find the first fetch's lease held; then it answers.
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Waited < waiters; {
		if time.Now().After(deadline) {
			t.Fatalf("%d exchanges waited for the fetch in flight, want %d", s.Stats().Waited, waiters)
		}
		time.Sleep(5 * time.Millisecond) // polls the counts
	}
	close(firstOut)
	for range waiters + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if m := most.Load(); m < waiters {
		t.Fatalf("at most %d exchanges at the provider at once after the unkept answer, want the %d waiters together", m, waiters)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A rotating exchange (WeChat's GET /cgi-bin/token) is never marked
// unkept, whatever its answer: sent together, its exchanges would
// invalidate one another's tokens. Another exchange's lease becomes the
// mark, and only while it is the fetch's own.
func TestRotatingExchangeIsNeverMarkedUnkept(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s, err := New(rdb, WithPrefix("unkept-rotating"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, lease, want string
	}{
		{"https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=s", "mine", "mine"},
		{"https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=s", "mine", "unkept"},
		{"https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=s", "another", "another"},
	} {
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		key := "unkept-rotating:" + tc.url + tc.lease
		rdb.Set(t.Context(), key+":lock", tc.lease, time.Minute)
		s.markUnkept(t.Context(), req, key, "mine")
		if got := rdb.Get(t.Context(), key+":lock").Val(); got != tc.want {
			t.Errorf("%s, lease %q: %q after the mark, want %q", req.URL.Path, tc.lease, got, tc.want)
		}
	}
}
