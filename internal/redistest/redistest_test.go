package redistest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A server restarted while another socket holds its port for a moment comes
// back once the port is free, instead of failing the test that restarts it.
func TestRestartWaitsForItsPort(t *testing.T) {
	s := Start(t)
	s.Stop()
	holder, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatalf("holding %s: %v", s.Addr, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Restart() }()

	// Let the port go once a start has failed on it: redis-server logs the
	// failed bind.
	_, port, _ := net.SplitHostPort(s.Addr)
	log := filepath.Join(s.dir, "redis-"+port+".log")
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), "in use") {
			break
		}
		if time.Now().After(deadline) {
			holder.Close()
			t.Fatalf("no failed bind logged in %s within 10s:\n%s", log, b)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's log file
	}
	holder.Close()
	if err := <-done; err != nil {
		t.Fatalf("Restart after the port came free: %v", err)
	}
	c := s.Client(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after the restart: %v", err)
	}
}

// Ports come from below the kernel's default ephemeral range, so an
// outgoing connection never takes one while its server is down, and below
// the cluster nodes' bus ports, so no cluster takes one either.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	for i := 0; i < 50; i++ {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < 10000 || p >= 20000 {
			t.Fatalf("FreePort gave %d, want [10000, 20000): below the bus ports (port+10000) and the ephemeral range", p)
		}
	}
}
