package providers

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

var errInjected = errors.New("injected read error")

// faultyBody serves data in random chunks and fails with err once errAt
// bytes have been read (io.EOF when errAt == len(data)).
type faultyBody struct {
	data   []byte
	off    int
	errAt  int
	err    error
	rnd    *rand.Rand
	closed bool
}

func newFaultyBody(data []byte, errAt int, err error, seed uint64) *faultyBody {
	if errAt < 0 || errAt > len(data) {
		errAt = len(data)
	}
	if errAt == len(data) && err == nil {
		err = io.EOF
	}
	return &faultyBody{data: data, errAt: errAt, err: err, rnd: rand.New(rand.NewPCG(seed, 7))}
}

func (b *faultyBody) Read(p []byte) (int, error) {
	if b.off >= b.errAt {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := min(len(p), b.errAt-b.off, 1+b.rnd.IntN(4096))
	copy(p, b.data[b.off:b.off+n])
	b.off += n
	if b.off == b.errAt && b.rnd.IntN(2) == 0 {
		return n, b.err // the error with the last bytes, as io.Reader allows
	}
	return n, nil
}

func (b *faultyBody) Close() error { b.closed = true; return nil }

// readAllChunked reads r in random chunk sizes (some empty) until an error,
// returning the bytes and the error (nil for io.EOF).
func readAllChunked(r io.Reader, seed uint64) ([]byte, error) {
	rnd := rand.New(rand.NewPCG(seed, 11))
	var out []byte
	buf := make([]byte, 8192)
	for {
		n, err := r.Read(buf[:rnd.IntN(len(buf))])
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func newResp(ct string, body io.ReadCloser, length int64) *http.Response {
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	return &http.Response{StatusCode: 200, Header: h, Body: body, ContentLength: length}
}

func TestPeekBody(t *testing.T) {
	// One object longer than any limit: a peek stops at a whole object.
	big := []byte(`{"errcode":90018,"errmsg":"` + strings.Repeat("x", 150000) + `"}`)
	tests := []struct {
		name       string
		ct         string
		body       []byte
		length     int64 // -1 unknown
		limit      int
		errAt      int // -1: none
		wantPeek   bool
		wantPrefix int // expected prefix length when peeked
		wantErr    bool
	}{
		{"json", "application/json", []byte(`{"errcode":0}`), -1, 0, -1, true, 13, false},
		{"json charset", "application/json; charset=utf-8", []byte(`{"a":1}`), 7, 0, -1, true, 7, false},
		{"text/json", "text/json", []byte(`{}`), -1, 0, -1, true, 2, false},
		{"problem+json", "application/problem+json", []byte(`{}`), -1, 0, -1, true, 2, false},
		{"upper case", "Application/JSON", []byte(`{}`), -1, 0, -1, true, 2, false},
		{"html", "text/html;charset=UTF-8", []byte(`<html>punish</html>`), -1, 0, -1, true, 19, false},
		{"plain", "text/plain", []byte(`busy`), -1, 0, -1, true, 4, false},
		{"missing type", "", []byte(`{"status":1111}`), -1, 0, -1, true, 15, false},
		{"image", "image/png", []byte("\x89PNG"), -1, 0, -1, false, 0, false},
		{"octet stream", "application/octet-stream", []byte(`{"errcode":1}`), -1, 0, -1, false, 0, false},
		{"event stream", "text/event-stream", []byte(`data: {}`), -1, 0, -1, false, 0, false},
		{"zero length", "application/json", nil, 0, 0, -1, false, 0, false},
		{"truncated at limit", "application/json", big, -1, 100, -1, true, 100, false},
		{"default limit", "application/json", big, -1, 0, -1, true, defaultPeekLimit, false},
		{"length known and large", "application/json", big, int64(len(big)), 0, -1, true, defaultPeekLimit, false},
		{"error inside prefix", "application/json", []byte(`{"errcode":90018,"errmsg":"cut"}`), -1, 0, 10, true, 10, true},
		{"error after prefix", "application/json", big, -1, 1000, 5000, true, 1000, false},
		{"error at once", "application/json", big, -1, 0, 0, true, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var injected error
			if tt.errAt >= 0 {
				injected = errInjected
			}
			orig := newFaultyBody(tt.body, tt.errAt, injected, 1)
			resp := newResp(tt.ct, orig, tt.length)
			prefix, err := PeekBody(resp, tt.limit)
			if (err != nil) != tt.wantErr {
				t.Fatalf("PeekBody error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, errInjected) {
				t.Fatalf("PeekBody error = %v, want the body's error", err)
			}
			if !tt.wantPeek {
				if prefix != nil || resp.Body != io.ReadCloser(orig) {
					t.Fatalf("peeked a body it should leave alone: prefix %q", prefix)
				}
				return
			}
			if len(prefix) != tt.wantPrefix {
				t.Fatalf("prefix length = %d, want %d", len(prefix), tt.wantPrefix)
			}
			if !bytes.HasPrefix(tt.body, prefix) {
				t.Fatalf("prefix %q is not a prefix of the body", prefix)
			}
			got, rerr := readAllChunked(resp.Body, 2)
			want := tt.body
			if tt.errAt >= 0 {
				want = tt.body[:tt.errAt]
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("caller read %d bytes, want %d (the original)", len(got), len(want))
			}
			if !errors.Is(rerr, injected) {
				t.Fatalf("caller's read error = %v, want %v", rerr, injected)
			}
			if err := resp.Body.Close(); err != nil || !orig.closed {
				t.Fatalf("Close did not close the original (err %v)", err)
			}
		})
	}
}

func TestPeekBodyNil(t *testing.T) {
	if p, err := PeekBody(nil, 0); p != nil || err != nil {
		t.Fatalf("nil response: %q, %v", p, err)
	}
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		resp := newResp("application/json", body, -1)
		if p, err := PeekBody(resp, 0); p != nil || err != nil || resp.Body != body {
			t.Fatalf("body %v: %q, %v, body replaced", body, p, err)
		}
	}
}

// With a known length, the buffer is exactly the body: one allocation for
// it and one for the replaying reader.
func TestPeekBodyAllocs(t *testing.T) {
	body := []byte(`{"errcode":90018,"errmsg":"处罚将在 2019-02-13 20:40:05 结束."}`)
	h := http.Header{"Content-Type": {"application/json"}}
	rd := bytes.NewReader(body)
	resp := &http.Response{Header: h}
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(body)
		resp.Body = io.NopCloser(rd)
		resp.ContentLength = int64(len(body))
		p, _ := PeekBody(resp, 0)
		if cap(p) != len(body) {
			t.Fatalf("buffer capacity %d, want %d", cap(p), len(body))
		}
	})
	// io.NopCloser itself allocates once.
	if allocs > 3 {
		t.Fatalf("PeekBody allocated %v times, want at most 2 (+1 for the test's NopCloser)", allocs)
	}
}

// FuzzPeekBody: whatever the body, its chunking, its length, an injected
// error and the peek limit, the caller reads the original bytes and gets
// the original error at the same offset.
func FuzzPeekBody(f *testing.F) {
	f.Add([]byte(`{"errcode":90018,"errmsg":"处罚将在 2019-02-13 20:40:05 结束."}`), uint64(1), -1, 0, uint8(0), uint8(0), false)
	f.Add([]byte(`{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"}`), uint64(2), 10, 8, uint8(1), uint8(1), true)
	f.Add([]byte(`<html><body>punish</body></html>`), uint64(3), 0, 1, uint8(2), uint8(3), false)
	f.Add([]byte("0123456789abcdef"), uint64(4), 5000, 100, uint8(200), uint8(0), true)
	f.Add([]byte{}, uint64(5), 0, 0, uint8(0), uint8(0), true)
	cts := []string{"application/json", "", "text/html", "image/png"}
	f.Fuzz(func(t *testing.T, unit []byte, seed uint64, errAt, limit int, repeat, ctIdx uint8, knownLen bool) {
		// Large bodies come from repeating the unit, up to 1 MiB.
		body := unit
		if repeat > 0 && len(unit) > 0 {
			times := min(int(repeat)*64, (1<<20)/len(unit))
			body = bytes.Repeat(unit, max(times, 1))
		}
		var injected error
		if errAt >= 0 && errAt <= len(body) {
			injected = errInjected
		} else {
			errAt = -1
		}
		if limit > 1<<20 || limit < -1 {
			limit %= 1 << 20
		}
		orig := newFaultyBody(body, errAt, injected, seed)
		length := int64(-1)
		if knownLen {
			length = int64(len(body))
		}
		resp := newResp(cts[int(ctIdx)%len(cts)], orig, length)
		prefix, err := PeekBody(resp, limit)
		if err != nil && !errors.Is(err, errInjected) {
			t.Fatalf("PeekBody error %v is not the body's", err)
		}
		if !bytes.HasPrefix(body, prefix) {
			t.Fatalf("prefix is not a prefix of the body")
		}
		want := body
		if errAt >= 0 {
			want = body[:errAt]
		}
		got, rerr := readAllChunked(resp.Body, seed+1)
		if !bytes.Equal(got, want) {
			t.Fatalf("caller read %d bytes, want the original %d", len(got), len(want))
		}
		if !errors.Is(rerr, injected) || (injected == nil && rerr != nil) {
			t.Fatalf("caller's error = %v, want %v", rerr, injected)
		}
		if lim := limit; lim > 0 && len(prefix) > lim || lim <= 0 && len(prefix) > defaultPeekLimit {
			t.Fatalf("prefix of %d bytes exceeds the limit %d", len(prefix), limit)
		}
		if resp.Body.Close() != nil || !orig.closed {
			t.Fatal("Close did not reach the original body")
		}
	})
}

func BenchmarkPeekBody(b *testing.B) {
	body := []byte(`{"errcode":0,"errmsg":"ok","result":{"userid":"manager4220","name":"张三"}}`)
	h := http.Header{"Content-Type": {"application/json;charset=utf-8"}}
	rd := bytes.NewReader(nil)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		resp := &http.Response{Header: h, Body: io.NopCloser(rd), ContentLength: int64(len(body))}
		if _, err := PeekBody(resp, 0); err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
}

// A second peek (a layer below looked already) reuses the first when it
// holds the answer, and the body still reads byte for byte as sent.
func TestPeekBodyTwice(t *testing.T) {
	const body = `{"errcode":0,"errmsg":"ok","user":"x"}`
	resp := &http.Response{Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: -1,
		Body: io.NopCloser(strings.NewReader(body))}
	first, err := PeekBody(resp, 4<<10)
	if err != nil || string(first) != body {
		t.Fatalf("first peek %q, %v", first, err)
	}
	wrapped := resp.Body
	second, err := PeekBody(resp, 16)
	if err != nil || string(second) != body[:16] || resp.Body != wrapped {
		t.Fatalf("second peek %q, %v (rewrapped: %v)", second, err, resp.Body != wrapped)
	}
	if got, _ := io.ReadAll(resp.Body); string(got) != body {
		t.Fatalf("body reads %q, want %q", got, body)
	}
}

// A second peek of a body that failed past its limit reports no error, as
// a first peek of that limit would not have read so far; one that wants
// more than was read gets the error.
func TestPeekBodyTwiceAfterAnError(t *testing.T) {
	errBroken := errors.New("connection reset")
	// Cut within its object: a peek stops at a whole object before the
	// error after it.
	const body = `{"errcode":0,"errmsg":"ok",`
	peek := func(limits ...int) (got []error) {
		resp := &http.Response{Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: -1,
			Body: io.NopCloser(io.MultiReader(strings.NewReader(body), iotest.ErrReader(errBroken)))}
		for _, l := range limits {
			_, err := PeekBody(resp, l)
			got = append(got, err)
		}
		return got
	}
	if errs := peek(4<<10, len(body)); !errors.Is(errs[0], errBroken) || errs[1] != nil {
		t.Errorf("peeks of 4 KiB then %d bytes: %v, want the error then none", len(body), errs)
	}
	if errs := peek(4<<10, 2<<10); !errors.Is(errs[1], errBroken) {
		t.Errorf("a second peek past what was read: %v, want the error", errs[1])
	}
}

// A gzip-encoded body (a caller that asked for gzip itself gets it as
// sent) is peeked decompressed, so that its error code is seen, and reaches
// the caller byte for byte as sent: a DingTalk 90018 went unseen.
func TestPeekBodyGzip(t *testing.T) {
	const answer = `{"errcode":90018,"errmsg":"request too frequent"}`
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte(answer))
	zw.Close()
	sent := zipped.Bytes()
	resp := &http.Response{
		Header: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}},
		Body:   io.NopCloser(bytes.NewReader(sent)), ContentLength: int64(len(sent)),
	}
	got, err := PeekBody(resp, 0)
	if err != nil || string(got) != answer {
		t.Fatalf("peeked %q, %v; want the answer decompressed", got, err)
	}
	if again, _ := PeekBody(resp, 0); string(again) != answer {
		t.Fatalf("peeked again %q", again)
	}
	if body, _ := io.ReadAll(resp.Body); !bytes.Equal(body, sent) {
		t.Fatal("the caller's body is not the bytes sent")
	}
	// Cut short: what the prefix holds, no more, no error.
	resp.Body = io.NopCloser(bytes.NewReader(sent))
	if got, _ := PeekBody(resp, 20); !strings.HasPrefix(answer, string(got)) {
		t.Fatalf("a short peek gave %q", got)
	}
}

// An answer of unknown length is streamed: the peek returns once it holds
// the first whole JSON object, while the stream's next part has not been
// sent, and the caller then reads every byte as sent. Reading on to the
// limit held RoundTrip until the stream had sent that much or ended.
func TestPeekBodyStopsAtAWholeObjectOfAStream(t *testing.T) {
	for _, ct := range []string{"application/json", "text/plain; charset=utf-8", ""} {
		pr, pw := io.Pipe()
		first, rest := `{"code":0,"event":"start"}`+"\n", `{"event":"end"}`+"\n"
		go pw.Write([]byte(first))
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: pr, ContentLength: -1}
		if ct != "" {
			resp.Header.Set("Content-Type", ct)
		}
		peeked := make(chan []byte, 1)
		go func() {
			p, _ := PeekBody(resp, 4096)
			peeked <- p
		}()
		select {
		case p := <-peeked:
			if string(p) != first {
				t.Errorf("%q: peeked %q, want the first object %q", ct, p, first)
			}
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("never peeked"))
			t.Fatalf("%q: the peek waited for the rest of the stream", ct)
		}
		go func() {
			pw.Write([]byte(rest))
			pw.Close()
		}()
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != first+rest {
			t.Errorf("%q: the caller read %q, %v, want %q", ct, got, err, first+rest)
		}
	}
	// An object cut by the stream is read on: its code may come after the cut.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"data":"x",`))
		pw.Write([]byte(`"code":99991400}`))
		pw.Close()
	}()
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: pr, ContentLength: -1}
	if p, _ := PeekBody(resp, 4096); string(p) != `{"data":"x","code":99991400}` {
		t.Errorf("an object sent in two parts peeked as %q", p)
	}
}

// A 64 KiB answer of unknown length sent a byte at a time (a slow or
// hostile upstream): the peek looks at each byte once. Scanning the whole
// prefix after each read took about a second of CPU here.
func BenchmarkPeekBodyByteAtATime(b *testing.B) {
	body := []byte(`{"code":0,"data":"` + strings.Repeat("x", 64<<10) + `"}`)
	for b.Loop() {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))), ContentLength: -1}
		if p, _ := PeekBody(resp, 64<<10); len(p) != 64<<10 {
			b.Fatalf("peeked %d bytes", len(p))
		}
	}
}
