package limiter_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// 22.8: a replica whose Redis client cannot complete the TLS handshake (the
// server's certificate is not trusted) used to log only "context deadline
// exceeded" when it fell back; it now says the failure is TLS's.
func TestSharedSaysWhenTLSFails(t *testing.T) {
	cert, key := redistest.SelfSigned(t)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	// No RootCAs: the self-signed certificate is not trusted.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), ContextTimeoutEnabled: true,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	var logs syncBuffer
	s, err := limiter.NewShared(client, limiter.SharedConfig{Prefix: "tlsdiag", Share: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 100, time.Second))}, MaxWait: time.Second}
	if res, err := s.Reserve(context.Background(), req); err != nil || !res.Local() {
		t.Fatalf("reserve: %+v %v, want a local slot", res, err)
	}
	waitFor(t, 10*time.Second, "the TLS diagnosis", func() bool { return strings.Contains(logs.String(), "TLS connection") })
	if !strings.Contains(logs.String(), "certificate") {
		t.Fatalf("the log does not give the cause:\n%s", logs.String())
	}
}
