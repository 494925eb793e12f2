package main_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
)

// A rediss:// URL with a password reaches a TLS Redis; a certificate the
// tool cannot verify is a connection error that says so.
func TestTLS(t *testing.T) {
	cert, key := redistest.SelfSigned(t)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "{throttle:wechat}:p:app:wx1", strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)+"|45009", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "requirepass", "sekret").Err(); err != nil {
		t.Fatal(err)
	}
	url := "rediss://:sekret@127.0.0.1:" + strconv.Itoa(port)
	out, stderr, code := ctlEnv(t, []string{"SSL_CERT_FILE=" + cert}, "", "-redis", url, "status", "-check")
	if code != 1 || !strings.Contains(out, "app:wx1") || !strings.Contains(out, "45009") {
		t.Fatalf("status over TLS: exit %d, %s\n%s", code, stderr, out)
	}
	_, stderr, code = ctlEnv(t, []string{"SSL_CERT_FILE=" + filepath.Join(t.TempDir(), "none.pem")}, "", "-redis", url, "status")
	if code != 2 || !strings.Contains(stderr, "Redis at 127.0.0.1:"+strconv.Itoa(port)+": its TLS certificate is not trusted") || strings.Contains(stderr, "sekret") {
		t.Fatalf("status with an unverifiable certificate: exit %d, %q", code, stderr)
	}
}

// Case 22.8: every TLS failure says TLS, never a bare "context deadline
// exceeded" or "EOF": a TLS client at a plain port, a plain client at a TLS
// port, and a server that wants a client certificate.
func TestTLSFailuresSayTLS(t *testing.T) {
	cert, key := redistest.SelfSigned(t)
	tlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	plain := redistest.Start(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	mtlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	redistest.Start(t, "--tls-port", strconv.Itoa(mtlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "yes")
	env := []string{"SSL_CERT_FILE=" + cert}
	tlsAddr := "127.0.0.1:" + strconv.Itoa(tlsPort)
	cases := []struct {
		name, url, want string
	}{
		{"TLS at a plain port", "rediss://" + plain.Addr, "Redis at " + plain.Addr + " did not complete a TLS handshake within 2s: is that port TLS?"},
		{"plain at a TLS port", "redis://" + tlsAddr, "Redis at " + tlsAddr + " closed the connection without answering: if that port speaks TLS, use rediss://" + tlsAddr},
		{"client certificate wanted", "rediss://127.0.0.1:" + strconv.Itoa(mtlsPort), "refused the TLS connection: remote error: tls: certificate required (the server wants a client certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, stderr, code := ctlEnv(t, env, "", "-redis", tc.url, "-timeout", "2s", "status")
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "context deadline exceeded") {
				t.Fatalf("exit %d, stderr %q (stdout %q); want exit 2 and %q", code, stderr, out, tc.want)
			}
			t.Logf("%s: %v: %s", tc.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
		})
	}
}
