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

// A rotating exchange (WeChat's GET /cgi-bin/token) whose answer holds a
// token is never marked unkept, whatever kept it from being kept: sent
// together, such exchanges would invalidate one another's tokens. Its
// error answers are marked, as every other exchange's unkept answers are.
func TestRotatingTokenAnswerIsNeverMarkedUnkept(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s, err := New(rdb, WithPrefix("unkept-rotating"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, answer string
		marked      bool
	}{
		{"https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=s", `{"access_token":"ACCESS_TOKEN_1234567890","expires_in":100}`, false},
		{"https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=s", `{"errcode":40125,"errmsg":"invalid appsecret"}`, true},
		{"https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=ww1&corpsecret=s", `{"errcode":0,"access_token":"ACCESS_TOKEN_1234567890","expires_in":100}`, true},
	} {
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		ex := exchangeFor(req.Method, req.URL.Path)
		if ex == nil {
			t.Fatalf("%s: not an exchange", tc.url)
		}
		key := "unkept-rotating:" + tc.answer
		s.markUnkept(t.Context(), ex, req, key, []byte(tc.answer))
		if got := rdb.Exists(t.Context(), key+":unkept").Val() == 1; got != tc.marked {
			t.Errorf("%s answered %s: marked %v, want %v", req.URL.Path, tc.answer, got, tc.marked)
		}
	}
}
