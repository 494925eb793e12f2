package faultproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	return faultproxy.Start(t, redistest.Shared(t).Addr)
}

// conn is a raw RESP connection through the proxy: the tests see exactly
// what reaches the client, with no client library retrying or pooling.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *faultproxy.Proxy) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

func (c *conn) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := io.WriteString(c, cmd+"\r\n"); err != nil {
		t.Fatalf("write %q: %v", cmd, err)
	}
}

// reply reads one line, waiting at most d.
func (c *conn) reply(d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func (c *conn) ping(t *testing.T) {
	t.Helper()
	c.send(t, "PING")
	if got, err := c.reply(5 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING: %q, %v", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Bytes go through unchanged, large values and pipelines included.
func TestForwards(t *testing.T) {
	p := newProxy(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, many chunks
	if err := rdb.Set(ctx, "faultproxy:big", big, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, "faultproxy:big").Bytes()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GET returned %d bytes (%v), want the %d sent", len(got), err, len(big))
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 1000)
	for i := range cmds {
		cmds[i] = pipe.Incr(ctx, "faultproxy:n")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(cmds); i++ {
		if cmds[i].Val() != cmds[i-1].Val()+1 {
			t.Fatalf("pipeline out of order at %d: %d after %d", i, cmds[i].Val(), cmds[i-1].Val())
		}
	}
	if n := p.Conns(); n < 1 {
		t.Fatalf("Conns = %d with a client connected", n)
	}
}

// Latency applies in each direction, so a round trip takes at least twice
// as long; setting it back to zero restores the direct path.
func TestLatency(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.ping(t) // connected and warm
	cases := []struct {
		latency time.Duration
		atLeast time.Duration
		under   time.Duration // zero: no upper bound checked
	}{
		{50 * time.Millisecond, 100 * time.Millisecond, 0},
		{150 * time.Millisecond, 300 * time.Millisecond, 0},
		{0, 0, 100 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.latency.String(), func(t *testing.T) {
			p.SetLatency(tc.latency)
			start := time.Now()
			c.ping(t)
			rtt := time.Since(start)
			if rtt < tc.atLeast {
				t.Errorf("round trip %v with latency %v, want at least %v", rtt, tc.latency, tc.atLeast)
			}
			if tc.under > 0 && rtt >= tc.under {
				t.Errorf("round trip %v with latency %v, want under %v", rtt, tc.latency, tc.under)
			}
		})
	}
}

// A stalled proxy accepts connections and swallows requests without an
// answer, which only a deadline ends; Resume delivers what it held.
func TestStallAndResume(t *testing.T) {
	p := newProxy(t)
	old := dial(t, p)
	old.ping(t)

	p.Stall()
	p.Stall() // idempotent
	fresh := dial(t, p)
	for _, c := range []*conn{old, fresh} {
		c.send(t, "PING")
		if got, err := c.reply(150 * time.Millisecond); !isTimeout(err) {
			t.Fatalf("reply while stalled: %q, %v; want a read timeout", got, err)
		}
	}
	// Only the caller's deadline ends the wait. go-redis applies a
	// context's deadline to the socket only with ContextTimeoutEnabled;
	// without it a stalled call lasts its ReadTimeout whatever the context.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := rdb.Ping(ctx).Err()
	took := time.Since(start)
	cancel()
	if err == nil || took < 200*time.Millisecond || took > 2*time.Second {
		t.Fatalf("go-redis PING while stalled: %v after %v, want its 200ms deadline to end it", err, took)
	}

	p.Resume()
	p.Resume() // idempotent
	for _, c := range []*conn{old, fresh} {
		if got, err := c.reply(5 * time.Second); err != nil || got != "+PONG" {
			t.Fatalf("held PING after Resume: %q, %v", got, err)
		}
		c.ping(t)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("go-redis PING after Resume: %v", err)
	}
}

// HoldRepliesAfter lets the marked command reach the server and holds its
// connection's replies, from then until Resume; other connections, new
// ones too, flow.
func TestHoldRepliesAfter(t *testing.T) {
	p := newProxy(t)
	marked, other := dial(t, p), dial(t, p)
	marked.ping(t)
	key := "faultproxy:" + t.Name()
	direct := redistest.Shared(t).Client(t)
	direct.Del(context.Background(), key)

	p.HoldRepliesAfter([]byte(key))
	if n := p.Holding(); n != 0 {
		t.Fatalf("Holding = %d before the marker was sent, want 0", n)
	}
	marked.send(t, "SET "+key+" ran")
	if got, err := marked.reply(150 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("reply of the marked command: %q, %v; want a read timeout", got, err)
	}
	if n := p.Holding(); n != 1 {
		t.Fatalf("Holding = %d once the marker was sent, want 1", n)
	}
	if v := direct.Get(context.Background(), key).Val(); v != "ran" {
		t.Fatalf("the server holds %q: the marked command did not reach it", v)
	}
	marked.send(t, "PING")
	other.ping(t)
	dial(t, p).ping(t)

	p.Resume()
	for _, want := range []string{"+OK", "+PONG"} {
		if got, err := marked.reply(5 * time.Second); err != nil || got != want {
			t.Fatalf("held reply after Resume: %q, %v; want %s", got, err, want)
		}
	}
	marked.send(t, "GET "+key) // the marker again: no longer held
	if got, err := marked.reply(5 * time.Second); err != nil || got != "$3" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
}

// Release delivers what is held and goes on holding: the marker sent again,
// on the connection released, holds its replies again until Resume.
func TestRelease(t *testing.T) {
	p := newProxy(t)
	marked := dial(t, p)
	marked.ping(t)
	key := "faultproxy:" + t.Name()

	p.HoldRepliesAfter([]byte(key))
	marked.send(t, "SET "+key+" ran")
	if got, err := marked.reply(150 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("reply of the marked command: %q, %v; want a read timeout", got, err)
	}
	p.Release()
	if got, err := marked.reply(5 * time.Second); err != nil || got != "+OK" {
		t.Fatalf("held reply after Release: %q, %v; want +OK", got, err)
	}
	if n := p.Holding(); n != 0 {
		t.Fatalf("Holding = %d after Release, want 0", n)
	}
	marked.send(t, "GET "+key)
	if got, err := marked.reply(150 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("the marker sent again after Release: %q, %v; want a read timeout", got, err)
	}
	if n := p.Holding(); n != 1 {
		t.Fatalf("Holding = %d once the marker was sent again, want 1", n)
	}
	p.Resume()
	if got, err := marked.reply(5 * time.Second); err != nil || got != "$3" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
}

// ResetAll resets every open connection; new ones work.
func TestResetAll(t *testing.T) {
	p := newProxy(t)
	a, b := dial(t, p), dial(t, p)
	a.ping(t)
	b.ping(t)

	p.ResetAll()
	for _, c := range []*conn{a, b} {
		got, err := c.reply(5 * time.Second)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after ResetAll: %q, %v; want ECONNRESET", got, err)
		}
	}
	dial(t, p).ping(t)

	// A call hanging on a stalled connection ends at once when it is reset,
	// long before its deadline.
	p = newProxy(t)
	p.Stall()
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ended := make(chan error, 1)
	start := time.Now()
	go func() { ended <- rdb.Ping(ctx).Err() }()
	waitConns(t, p, 1)
	p.ResetAll()
	if err := <-ended; err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("hung PING after ResetAll: %v after %v, want an error at once", err, time.Since(start))
	}
	p.Resume()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING on a new connection: %v", err)
	}
}

// waitConns waits until the proxy forwards n connections.
func waitConns(t *testing.T, p *faultproxy.Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Conns() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Conns = %d, want %d", p.Conns(), n)
		}
		time.Sleep(time.Millisecond) // polling the proxy's state: there is no event to wait on
	}
}

// Faults combine and clear: stalled with latency, then back to normal.
func TestBackToNormal(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	p.SetLatency(100 * time.Millisecond)
	p.Stall()
	c.send(t, "PING")
	if _, err := c.reply(50 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("want a timeout while stalled, got %v", err)
	}
	p.SetLatency(0)
	p.Resume()
	if got, err := c.reply(5 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("held PING: %q, %v", got, err)
	}
	start := time.Now()
	c.ping(t)
	if rtt := time.Since(start); rtt >= 100*time.Millisecond {
		t.Fatalf("round trip %v after clearing every fault", rtt)
	}
}

// A target that refuses shows up as a reset connection, not a hang.
func TestTargetDown(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The proxy accepts, fails to reach the target and resets the client:
	// as the dial itself when the reset wins the race, or as the first read.
	raw, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		if isTimeout(err) {
			t.Fatalf("dial: %v, want the connection accepted or reset", err)
		}
		return
	}
	defer raw.Close()
	c := &conn{Conn: raw, r: bufio.NewReader(raw)}
	_, _ = io.WriteString(c, "PING\r\n") // may fail already: the reset can come first
	if got, err := c.reply(5 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("reply through a proxy to nothing: %q, %v; want the connection dropped", got, err)
	}
}

func TestNewRejectsBadTarget(t *testing.T) {
	if _, err := faultproxy.New("no-port"); err == nil {
		t.Fatal("accepted a target without a port")
	}
}

// Close ends every connection and every goroutine of the proxy, even with
// bytes held by a stall.
func TestCloseLeavesNothing(t *testing.T) {
	redistest.Shared(t) // started before the snapshot of running goroutines
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := faultproxy.New(redistest.Shared(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 16)); err == nil || isTimeout(err) {
		t.Fatalf("read on a connection of a closed proxy: %v, want it reset", err)
	}
}
