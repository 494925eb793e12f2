package defaulttransport_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

const (
	appKey, appSecret = "dingapp", "secret"
	robotToken        = "b4f2c1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2"
)

func newEmulator(t *testing.T) *dingtalktest.Server {
	emu := dingtalktest.New(dingtalktest.Options{
		Apps:   map[string]string{appKey: appSecret},
		Tokens: map[string]string{robotToken: "robot"},
	})
	t.Cleanup(emu.Close)
	return emu
}

// install is the recipe, for the duration of one test: the network's
// stand-in first becomes the default transport, then the Transport
// replaces it and sends through it.
func install(t *testing.T, emu *dingtalktest.Server, cfg dingtalk.Config, opts ...throttle.Option) {
	prev := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = prev })
	http.DefaultTransport = sdktest.Redirect(emu.URL)

	http.DefaultTransport = throttle.MustNew(append(opts, throttle.WithProfiles(dingtalk.MustNew(cfg).Profile()))...)
}

// New captures the default transport of the moment as its base: installing
// it as the new default neither loops nor loses the old one.
func TestNewSendsThroughThePreviousDefault(t *testing.T) {
	prev := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = prev })
	emu := newEmulator(t)
	base := &counting{base: sdktest.Redirect(emu.URL)}
	http.DefaultTransport = base

	http.DefaultTransport = throttle.MustNew(throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}).Profile()))

	resp, err := http.Get("https://oapi.dingtalk.com/gettoken?appkey=" + appKey + "&appsecret=" + appSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		Errcode     int    `json:"errcode"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.Errcode != 0 || tok.AccessToken == "" {
		t.Fatalf("token answer %+v, %v", tok, err)
	}
	if n := base.count(); n != 1 || emu.Stats().Requests != 1 {
		t.Fatalf("the previous default sent %d requests, the emulator saw %d; want 1 and 1", n, emu.Stats().Requests)
	}
}

type counting struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    int
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *counting) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
