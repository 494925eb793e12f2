package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/wechat"
)

// scripted answers each request with the next step of a script, then OK.
func scripted(steps ...func(w http.ResponseWriter)) *recorder {
	var n atomic.Int64
	return &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i < len(steps) {
			steps[i](w)
			return
		}
		io.WriteString(w, `{"errcode":0,"errmsg":"ok"}`)
	}}
}

func busy(w http.ResponseWriter) {
	w.Header().Set("X-Test-Busy", "1")
	io.WriteString(w, `{"errcode":-1,"errmsg":"系统繁忙"}`)
}

func status(code int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		io.WriteString(w, `{"code":"`+http.StatusText(code)+`"}`)
	}
}

func penalty(ms string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("X-Test-Penalty-Ms", ms)
		io.WriteString(w, `{"errcode":90018,"errmsg":"too fast"}`)
	}
}

// processedPenalty is a short quota penalty whose verdict does not say the
// call went unprocessed.
func processedPenalty(w http.ResponseWriter) {
	w.Header().Set("X-Test-Processed", "1")
	penalty("20")(w)
}

// counting counts Reserve calls: one per attempt, each taking its own slot.
type counting struct {
	limiter.Limiter
	n atomic.Int64
}

func (c *counting) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	c.n.Add(1)
	return c.Limiter.Reserve(ctx, req)
}

func retrying(t *testing.T, lim limiter.Limiter, extra ...throttle.Option) *http.Client {
	opts := append([]throttle.Option{
		throttle.WithLimiter(lim),
		throttle.WithProfiles(testProfile("p", mustRule(t, 100, time.Second))),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}),
		throttle.WithoutTelemetry(),
	}, extra...)
	return &http.Client{Transport: throttle.MustNew(opts...)}
}

func do(t *testing.T, c *http.Client, method, u string, body string) (*http.Response, string, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// "System busy" then success: one successful call, two attempts, two slots.
func TestRetryBusyThenSuccess(t *testing.T) {
	rec := scripted(busy)
	srv := serve(t, rec)
	lim := &counting{Limiter: limiter.NewMemory()}
	_, body, err := do(t, retrying(t, lim), http.MethodPost, srv.URL+"/send", `{"msg":"hi"}`)
	if err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("body %q err %v, want the success after a retry", body, err)
	}
	if n := len(rec.seen()); n != 2 {
		t.Errorf("server saw %d attempts, want 2", n)
	}
	if n := lim.n.Load(); n != 2 {
		t.Errorf("%d slots taken, want 2: every attempt takes its own", n)
	}
}

// A 1s penalty inside a 3s budget: the call succeeds after the penalty, and
// the retry reaches the provider no sooner than the penalty's end.
func TestRetryWaitsOutShortPenalty(t *testing.T) {
	rec := scripted(penalty("1000"))
	srv := serve(t, rec)
	_, body, err := do(t, retrying(t, limiter.NewMemory(), throttle.WithMaxWait(3*time.Second)), http.MethodGet, srv.URL+"/a", "")
	if err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("body %q err %v, want success after the penalty", body, err)
	}
	seen := rec.seen()
	if len(seen) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(seen))
	}
	if gap := seen[1].Sub(seen[0]); gap < 990*time.Millisecond {
		t.Errorf("retry arrived %v after the quota error, inside the 1s penalty", gap)
	}
}

// The same penalty inside a 500ms budget: the provider's answer comes back
// at once, body intact, and nothing more is sent.
func TestRetryGivesUpWhenPenaltyOutlastsBudget(t *testing.T) {
	rec := scripted(penalty("1000"))
	srv := serve(t, rec)
	began := time.Now()
	resp, body, err := do(t, retrying(t, limiter.NewMemory(), throttle.WithMaxWait(500*time.Millisecond)), http.MethodGet, srv.URL+"/a", "")
	if err != nil {
		t.Fatalf("err = %v, want the provider's answer", err)
	}
	if body != `{"errcode":90018,"errmsg":"too fast"}` || resp.Header.Get("X-Test-Penalty-Ms") == "" {
		t.Fatalf("got %q, want the provider's quota answer byte for byte", body)
	}
	if elapsed := time.Since(began); elapsed >= 500*time.Millisecond {
		t.Errorf("took %v: it waited instead of giving up at once", elapsed)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// When retries run out the caller gets the last answer with its body.
func TestRetryKeepsLastResponse(t *testing.T) {
	rec := scripted(status(503), status(503), status(503), status(503))
	srv := serve(t, rec)
	resp, body, err := do(t, retrying(t, limiter.NewMemory()), http.MethodGet, srv.URL+"/a", "")
	if err != nil || resp.StatusCode != 503 || body != `{"code":"Service Unavailable"}` {
		t.Fatalf("status %v body %q err %v, want the last 503 with its body", resp, body, err)
	}
	if n := len(rec.seen()); n != 3 {
		t.Fatalf("server saw %d attempts, want 3", n)
	}
}

// Ambiguous failures are retried for idempotent methods only; answers that
// prove the call was not processed are retried for any method.
func TestRetryOnlyWhatIsSafe(t *testing.T) {
	cases := []struct {
		name   string
		method string
		step   func(http.ResponseWriter)
		want   int // requests the server sees
	}{
		{"POST 500 is ambiguous", http.MethodPost, status(500), 1},
		{"POST 502 is ambiguous", http.MethodPost, status(502), 1},
		{"POST 504 is ambiguous", http.MethodPost, status(504), 1},
		{"POST 503 was not processed", http.MethodPost, status(503), 2},
		{"POST busy was not processed", http.MethodPost, busy, 2},
		{"GET 500 may repeat", http.MethodGet, status(500), 2},
		{"PUT 504 may repeat", http.MethodPut, status(504), 2},
		// A quota verdict that does not say the call went unprocessed (a
		// custom profile's) is no proof for a POST.
		{"POST quota, maybe processed", http.MethodPost, processedPenalty, 1},
		{"GET quota, maybe processed", http.MethodGet, processedPenalty, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := scripted(tc.step)
			srv := serve(t, rec)
			if _, _, err := do(t, retrying(t, limiter.NewMemory()), tc.method, srv.URL+"/a", "x"); err != nil {
				t.Fatal(err)
			}
			if n := len(rec.seen()); n != tc.want {
				t.Fatalf("server saw %d requests, want %d", n, tc.want)
			}
		})
	}
}

// A POST that times out after being written is sent exactly once; a GET in
// the same spot is retried.
func TestRetryNeverRepeatsWrittenPost(t *testing.T) {
	release := make(chan struct{})
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) { <-release }}
	srv := serve(t, rec)
	defer close(release)
	base := &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond}
	defer base.CloseIdleConnections()
	c := retrying(t, limiter.NewMemory(), throttle.WithBase(base))
	if _, _, err := do(t, c, http.MethodPost, srv.URL+"/send", "msg"); err == nil {
		t.Fatal("POST succeeded, want the timeout")
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("POST reached the server %d times, want exactly once", n)
	}
	if _, _, err := do(t, c, http.MethodGet, srv.URL+"/get", ""); err == nil {
		t.Fatal("GET succeeded, want the timeout")
	}
	if n := len(rec.seen()); n != 4 {
		t.Fatalf("server saw %d requests, want 1 POST + 3 GET attempts", n)
	}
}

// failFirst fails its first round trip before writing anything, telling
// the request's trace it asked for a connection, as net/http does before
// it dials.
type failFirst struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (f *failFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.n.Add(1) == 1 {
		if tr := httptrace.ContextClientTrace(r.Context()); tr != nil && tr.GetConn != nil {
			tr.GetConn(r.URL.Host)
		}
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, errors.New("dial tcp: connection refused")
	}
	return f.next.RoundTrip(r)
}

// roundTripFunc is a base transport in a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A base transport that reports nothing of its work (a wrapper, an HTTP/3
// client) cannot say it did not write: a POST that fails through it is
// sent once. It used to count as failing before the write, and was sent
// three times.
func TestRetryUntracedPostSentOnce(t *testing.T) {
	var sent atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		sent.Add(1)
		return nil, errors.New("read tcp: connection reset by peer")
	})
	c := retrying(t, limiter.NewMemory(), throttle.WithBase(base))
	if _, _, err := do(t, c, http.MethodPost, "http://127.0.0.1:9/send", "msg"); err == nil {
		t.Fatal("a failed POST answered")
	}
	if n := sent.Load(); n != 1 {
		t.Fatalf("a POST that failed after its body was read was sent %d times, want 1", n)
	}
}

// A failure before the request was written is retried even for POST, and
// the body is sent whole.
func TestRetryUnwrittenPost(t *testing.T) {
	var got atomic.Value
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		io.WriteString(w, "{}")
	}}
	srv := serve(t, rec)
	c := retrying(t, limiter.NewMemory(), throttle.WithBase(&failFirst{next: http.DefaultTransport}))
	if _, _, err := do(t, c, http.MethodPost, srv.URL+"/send", "the body"); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.seen()); n != 1 || got.Load() != "the body" {
		t.Fatalf("server saw %d requests with body %q, want 1 with the whole body", n, got.Load())
	}
}

// The retry machinery does not follow redirects (the caller's client does),
// and each hop passes through the limiter.
func TestRedirectsBelongToTheOuterClient(t *testing.T) {
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusFound)
			return
		}
		io.WriteString(w, "{}")
	}}
	srv := serve(t, rec)
	lim := &counting{Limiter: limiter.NewMemory()}
	if _, _, err := do(t, retrying(t, lim), http.MethodGet, srv.URL+"/old", ""); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	paths := strings.Join(rec.paths, ",")
	rec.mu.Unlock()
	if paths != "/old,/new" || lim.n.Load() != 2 {
		t.Fatalf("paths %s with %d slots, want /old,/new with 2", paths, lim.n.Load())
	}
	noFollow := retrying(t, limiter.NewMemory())
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, _, err := do(t, noFollow, http.MethodGet, srv.URL+"/old", "")
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("status %v err %v: the transport followed a redirect itself", resp, err)
	}
}

// With no hint of the provider's own, Retry-After (seconds, or an HTTP date)
// sets the wait, and the retry arrives no sooner.
func TestRetryHonoursRetryAfter(t *testing.T) {
	cases := []struct {
		name  string
		value func() string
		min   time.Duration
	}{
		{"seconds", func() string { return "1" }, time.Second},
		{"http date", func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := scripted(func(w http.ResponseWriter) {
				w.Header().Set("Retry-After", tc.value())
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			srv := serve(t, rec)
			c := retrying(t, limiter.NewMemory(), throttle.WithMaxWait(5*time.Second))
			if _, body, err := do(t, c, http.MethodGet, srv.URL+"/a", ""); err != nil || !strings.Contains(body, `"errcode":0`) {
				t.Fatalf("body %q err %v, want success after the hinted wait", body, err)
			}
			seen := rec.seen()
			if len(seen) != 2 {
				t.Fatalf("server saw %d requests, want 2", len(seen))
			}
			// An HTTP date has whole seconds: 2s ahead is at least 1s.
			if gap := seen[1].Sub(seen[0]); gap < tc.min-10*time.Millisecond {
				t.Errorf("retry came %v after the 503, before its Retry-After", gap)
			}
		})
	}
}

// A Retry-After beyond the budget ends the call at once with the answer.
func TestRetryAfterBeyondBudget(t *testing.T) {
	rec := scripted(func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	srv := serve(t, rec)
	began := time.Now()
	resp, _, err := do(t, retrying(t, limiter.NewMemory(), throttle.WithMaxWait(time.Second)), http.MethodGet, srv.URL+"/a", "")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("resp %v err %v, want the 503", resp, err)
	}
	if d := time.Since(began); d >= time.Second {
		t.Errorf("took %v: it waited for a hint beyond the budget", d)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// countingReader is a request body that counts its bytes read.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (countingReader) Close() error { return nil }

// bodies records the body of every request the server sees.
func bodies() (*recorder, func() []string) {
	var mu sync.Mutex
	var got []string
	var n atomic.Int64
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		if n.Add(1) == 1 {
			status(503)(w)
			return
		}
		io.WriteString(w, `{"errcode":0,"errmsg":"ok"}`)
	}}
	return rec, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// A retry sends the body again from GetBody: the body is never copied, and
// each attempt reads a fresh one.
func TestRetryRewindsWithGetBody(t *testing.T) {
	rec, got := bodies()
	srv := serve(t, rec)
	const payload = "a media upload, read from its source each time"
	var read, rewinds atomic.Int64
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/upload", countingReader{strings.NewReader(payload), &read})
	req.GetBody = func() (io.ReadCloser, error) {
		rewinds.Add(1)
		return countingReader{strings.NewReader(payload), &read}, nil
	}
	req.ContentLength = int64(len(payload))
	resp, err := retrying(t, limiter.NewMemory()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if b := got(); len(b) != 2 || b[0] != payload || b[1] != payload {
		t.Fatalf("server saw bodies %q, want the payload twice", b)
	}
	if n := rewinds.Load(); n != 1 {
		t.Errorf("GetBody called %d times, want once (for the retry)", n)
	}
	if n := read.Load(); n != 2*int64(len(payload)) {
		t.Errorf("%d bytes read from the sources, want %d: the body was copied", n, 2*len(payload))
	}
}

// A body without GetBody is copied for retries up to 1 MiB; a longer one is
// streamed once and never retried.
func TestRetryBodyWithoutGetBody(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		attempts int
	}{
		{"1 MiB is copied and retried", 1 << 20, 2},
		{"past 1 MiB is sent once", 1<<20 + 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, got := bodies()
			srv := serve(t, rec)
			payload := strings.Repeat("x", tc.size)
			var read atomic.Int64
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/upload", nil)
			req.Body = countingReader{strings.NewReader(payload), &read} // no GetBody
			req.ContentLength = int64(tc.size)
			resp, err := retrying(t, limiter.NewMemory()).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			b := got()
			if len(b) != tc.attempts {
				t.Fatalf("server saw %d attempts, want %d", len(b), tc.attempts)
			}
			for i := range b {
				if b[i] != payload {
					t.Fatalf("attempt %d: body of %d bytes, want the %d sent", i+1, len(b[i]), tc.size)
				}
			}
			if n := read.Load(); n != int64(tc.size) {
				t.Errorf("%d bytes read from the source, want %d (read once)", n, tc.size)
			}
		})
	}
}

// closeCounter is a base transport that counts CloseIdleConnections.
type closeCounter struct {
	http.RoundTripper
	closed atomic.Int64
}

func (c *closeCounter) CloseIdleConnections() { c.closed.Add(1) }

// http.Client.CloseIdleConnections reaches the base transport through the
// Transport, with the layers New wraps around the base too (token sharing,
// which WithRedis turns on, and apps): it reached the base only without
// them.
func TestCloseIdleConnectionsForwards(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for _, tc := range []struct {
		name string
		opts []throttle.Option
	}{
		{"base alone", nil},
		{"Redis, tokens shared", []throttle.Option{throttle.WithRedis(rdb)}},
		{"apps", []throttle.Option{throttle.WithApps(apps.Config{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &closeCounter{RoundTripper: http.DefaultTransport}
			tr := throttle.MustNew(append(tc.opts, throttle.WithBase(base), throttle.WithoutTelemetry())...)
			t.Cleanup(func() { _ = tr.Close() })
			(&http.Client{Transport: tr}).CloseIdleConnections()
			if n := base.closed.Load(); n != 1 {
				t.Fatalf("base CloseIdleConnections called %d times, want 1", n)
			}
		})
	}
}

// WeChat's GET /cgi-bin/token issues a new token and retires the last with
// every call: a GET, yet not idempotent. After an ambiguous failure (a 502
// the API may have acted behind) it is returned, not sent again, which
// would charge the account's 2,000 a day twice and invalidate the token
// the first call may have handed out; DingTalk's GET /gettoken, which
// hands the same token out again, is still retried.
func TestRotatingTokenExchangeIsNotRepeated(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		profile    func(host string) providers.Profile
		want       int
	}{
		{"wechat /cgi-bin/token", "/cgi-bin/token?grant_type=client_credential&appid=wx1&secret=s", func(host string) providers.Profile {
			return wechat.MustNew(wechat.Config{Hosts: []string{host}, Apps: []wechat.App{{AppID: "wx1"}}}).Profile()
		}, 1},
		{"dingtalk /gettoken", "/gettoken?appkey=dingapp&appsecret=s", func(host string) providers.Profile {
			return dingtalk.MustNew(dingtalk.Config{Hosts: []string{host}, Apps: []dingtalk.App{{AppKey: "dingapp"}}}).Profile()
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := scripted(status(http.StatusBadGateway))
			srv := serve(t, rec)
			c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(tc.profile(srv.Listener.Addr().String())),
				throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}),
				throttle.WithoutTelemetry(), throttle.WithLogger(quiet))}
			if _, _, err := do(t, c, http.MethodGet, srv.URL+tc.path, ""); err != nil {
				t.Fatal(err)
			}
			if n := len(rec.seen()); n != tc.want {
				t.Fatalf("the provider saw %d exchanges, want %d", n, tc.want)
			}
		})
	}
}
