package faultproxy

import "testing"

// Start is New for a test: it fails the test when the proxy cannot listen,
// and closes the proxy when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
