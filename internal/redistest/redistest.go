package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv names the variable that turns a missing redis-server into a failure.
const RequireEnv = "THROTTLE_REQUIRE_REDIS"

// Binary returns the path of redis-server, or an error saying how to get it.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH (install it, e.g. apt-get install -y redis-server, or set REDIS_SERVER)")
	}
	return p, nil
}

// need returns the binary, or skips (fails under THROTTLE_REQUIRE_REDIS=1).
func need(tb testing.TB) string {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("%v; %s=1 requires it", err, RequireEnv)
		}
		tb.Skipf("skipping: %v", err)
	}
	return bin
}

// Server is one redis-server process.
type Server struct {
	Addr string

	bin  string
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start runs a fresh redis-server for the test and stops it at cleanup.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := NewServer(need(tb), tb.TempDir(), extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns one redis-server for the whole test package, started on
// first use. Call StopShared from TestMain so it does not outlive the tests;
// tests keep out of each other's way by using distinct keys.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	bin := need(tb)
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "redistest")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = NewServer(bin, dir)
	})
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// Main runs a package's tests and stops the shared server they started,
// which would otherwise outlive the test binary: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the package's shared server, if it was started.
func StopShared() {
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.dir)
	}
}

// NewServer starts redis-server from bin with its files in dir, on a free
// loopback port, and waits until it answers.
func NewServer(bin, dir string, extra ...string) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no", "--daemonize", "no",
			"--logfile", filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log"),
		}, extra...)
		if lastErr = s.run(0); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Restart starts the process again on the same port (after Stop or Kill).
// While the server was down, the port may have been held for a moment by
// another socket (a test's listener probing for a free port, say): a start
// that exits before answering is tried again, for up to 5 s.
func (s *Server) Restart() error { return s.run(5 * time.Second) }

// run starts the process, trying again for up to retry while it exits
// before answering. A first start gives retry 0: its caller picks another
// port instead.
func (s *Server) run(retry time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redistest: %s is already running", s.Addr)
	}
	deadline := time.Now().Add(retry)
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		cmd, err := s.start()
		if err == nil {
			s.cmd = cmd
			return nil
		}
		if !errors.Is(err, errExited) || time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s: %w", s.Addr, err)
		}
		time.Sleep(backoff) // the port's other holder is another process: nothing to wait on
	}
}

// errExited is a start whose process ended before it answered, most often
// because its port was taken.
var errExited = errors.New("exited before answering")

// start runs the process once and waits until it answers.
func (s *Server) start() (*exec.Cmd, error) {
	cmd := exec.Command(s.bin, s.args...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitReady(s.Addr, exited); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	// The waiter goroutine reaps the process when it ends.
	go func() { <-exited }()
	return cmd, nil
}

// waitReady polls PING until the server answers, it exits, or 10 s pass.
func waitReady(addr string, exited <-chan error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 50*time.Millisecond) {
		select {
		case err := <-exited:
			return fmt.Errorf("%w: %v", errExited, err)
		default:
		}
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within 10s: %w", err)
		}
		time.Sleep(backoff) // polling an external process: there is nothing to wait on
	}
}

// Stop kills the process (SIGKILL, as a crash would); Restart brings it back
// on the same port, empty.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	// Wait until the port is free again, so Restart can bind it.
	for i := 0; i < 200; i++ {
		conn, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
		if err != nil {
			break
		}
		conn.Close()
		time.Sleep(5 * time.Millisecond)
	}
	s.cmd = nil
}

// Client returns a client for the server, closed at cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// FreePort returns a free loopback TCP port below the kernel's ephemeral
// range (which starts at 32768 by default), so that no outgoing connection
// takes it as its local port while a test's server is down for a restart.
// Ports come from [10000, 20000) and a cluster node's bus port (port+10000)
// from [20000, 30000): a standalone server's port is never another
// package's bus port.
func FreePort() (int, error) {
	for i := 0; i < 200; i++ {
		port := lowPortFrom + rand.IntN(lowPortTo-lowPortFrom)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port in [10000, 20000) after 200 tries")
}

const lowPortFrom, lowPortTo = 10000, 20000
