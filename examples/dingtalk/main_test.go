package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func short() options {
	return options{duration: 2 * time.Second, replicas: 4, demand: 5, egressLimit: 1000, jitter: 20 * time.Millisecond}
}

// The example runs offline and reports zero quota errors: run fails when the
// emulator rejected anything or the metrics count a quota error.
func TestExampleOfflineHasNoQuotaErrors(t *testing.T) {
	var out bytes.Buffer
	if err := run(short(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "the provider rejected 0 calls for exceeding a limit and banned the IP 0 times.") {
		t.Fatalf("summary does not report a clean run:\n%s", out.String())
	}
}

func TestExampleOnRedis(t *testing.T) {
	srv := redistest.Shared(t)
	o := short()
	o.redisURL = "redis://" + srv.Addr + "/0"
	var out bytes.Buffer
	if err := run(o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// Without throttle the same load trips the provider's limits: the example's
// -naive mode must show it, or it shows nothing.
func TestExampleNaiveTripsTheLimits(t *testing.T) {
	o := short()
	o.naive = true
	var out bytes.Buffer
	if err := run(o, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "rejected 0 calls for exceeding") {
		t.Fatalf("the naive run was not rejected:\n%s", out.String())
	}
	if strings.Contains(out.String(), "these differ") {
		t.Fatalf("the callers' quota answers do not reconcile with the emulator's:\n%s", out.String())
	}
}

// A -redis URL that does not parse is refused without quoting it: the
// parser's message shows the password as far as it read it.
func TestExampleBadRedisURLKeepsThePassword(t *testing.T) {
	o := short()
	o.redisURL = "redis://u:Xq7#Zv9@127.0.0.1:1"
	err := run(o, io.Discard)
	if err == nil || strings.Contains(err.Error(), "Xq7") || strings.Contains(err.Error(), "Zv9") {
		t.Fatalf("run: %v, want an error naming no part of the password", err)
	}
}

// On a Redis with a password, the example names the Redis by its address
// alone: its first line quoted the whole -redis URL, password and all.
func TestExampleOnRedisHidesThePassword(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "Xq7Zv9").Err(); err != nil {
		t.Fatal(err)
	}
	o := short()
	o.redisURL = "redis://:Xq7Zv9@" + srv.Addr + "/0"
	var out bytes.Buffer
	if err := run(o, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "Xq7Zv9") {
		t.Fatalf("the password was printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "sharing Redis at "+srv.Addr) {
		t.Fatalf("the Redis is not named by its address:\n%s", out.String())
	}
}

// failingTransport fails every request as a network error does.
type failingTransport struct{}

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("dial tcp: connection refused")
}

// A failed token exchange with the real DingTalk names no secret: the
// *url.Error quoted the whole URL, appsecret and all.
func TestRealTokenErrorHidesTheSecret(t *testing.T) {
	old := http.DefaultClient.Transport
	http.DefaultClient.Transport = failingTransport{}
	defer func() { http.DefaultClient.Transport = old }()
	_, err := realToken("dingkey", "Sx9Secret")
	if err == nil || strings.Contains(err.Error(), "Sx9Secret") {
		t.Fatalf("realToken: %v, want an error without the secret", err)
	}
}
