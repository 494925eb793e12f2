package dingtalkofficial_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	contact "github.com/alibabacloud-go/dingtalk/contact_1_0"
	oauth2 "github.com/alibabacloud-go/dingtalk/oauth2_1_0"
	util "github.com/alibabacloud-go/tea-utils/v2/service"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/dingtalkofficial"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

const appKey, appSecret = "dingapp", "secret"

func newEmulator(t *testing.T) *dingtalktest.Server {
	emu := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{appKey: appSecret}})
	t.Cleanup(emu.Close)
	return emu
}

// transport is the recipe: the DingTalk preset, keyed by the app.
func transport(emu *dingtalktest.Server, opts ...throttle.Option) *throttle.Transport {
	opts = append(opts,
		throttle.WithBase(sdktest.Redirect(emu.URL)),
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}).Profile()),
	)
	return throttle.MustNew(opts...)
}

type sdk struct {
	contacts *contact.Client
	token    string
}

func newSDK(t *testing.T, emu *dingtalktest.Server, opts ...throttle.Option) *sdk {
	return newSDKOver(t, transport(emu, opts...))
}

// newSDKOver fetches a token and returns a contact client, both sending
// through rt.
func newSDKOver(t *testing.T, rt http.RoundTripper) *sdk {
	auth, err := oauth2.NewClient(dingtalkofficial.Config(rt))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.GetAccessToken(&oauth2.GetAccessTokenRequest{AppKey: ptr(appKey), AppSecret: ptr(appSecret)})
	if err != nil {
		t.Fatal(err)
	}
	contacts, err := contact.NewClient(dingtalkofficial.Config(rt))
	if err != nil {
		t.Fatal(err)
	}
	return &sdk{contacts: contacts, token: *tok.Body.AccessToken}
}

// getUser calls the SDK as a user would: ...WithOptions with its headers
// and a non-nil RuntimeOptions.
func (s *sdk) getUser(unionID string) error {
	resp, err := s.contacts.GetUserWithOptions(ptr(unionID),
		&contact.GetUserHeaders{XAcsDingtalkAccessToken: ptr(s.token)}, &util.RuntimeOptions{})
	if err != nil {
		return err
	}
	if b := resp.Body; b == nil || *resp.StatusCode != 200 || b.UnionId == nil || *b.UnionId != unionID || b.Nick == nil || *b.Nick != "张三" {
		return fmt.Errorf("user parsed as %v", resp)
	}
	return nil
}

// Three times the per-API limit at once: every call is answered and
// parsed, and the emulator rejects none.
//
// A client of this SDK is not safe for concurrent use (every call writes
// its Headers field, in GetRpcHeaders): each goroutine takes its own, and
// they all share one Transport.
func TestAboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	rt := transport(emu)
	const workers = 20
	idle := make(chan *sdk, workers)
	for range workers {
		idle <- newSDKOver(t, rt)
	}
	sdktest.NoErrors(t, sdktest.Fire(60, workers, func(int) error {
		s := <-idle
		defer func() { idle <- s }()
		return s.getUser("manager4220")
	}))
	if st := emu.Stats(); st.Rejected != 0 || st.Bans != 0 || st.Requests != workers+60 {
		t.Fatalf("emulator: %+v, want %d requests (a token per client and 60 calls) and no rejection", st, workers+60)
	}
}

func TestErrorsThroughTheSDK(t *testing.T) {
	emu := newEmulator(t)
	impatient := newSDK(t, emu, throttle.WithMaxWait(0))
	sdktest.UntilThrottled(t, 1000, func() error { return impatient.getUser("manager4220") })

	s := newSDK(t, emu)
	emu.Ban()
	_ = s.getUser("manager4220") // answered with the ban: the preset penalises the egress IP
	sdktest.Penalized(t, s.getUser("manager4220"))
}

func ptr(s string) *string { return &s }

// The adapter ignores the SDK's own timeouts (they belong to the
// transport the SDK builds) and the SDK passes no context: a provider
// that hangs held the call. ConfigWithTimeout bounds it by the client's
// Timeout.
func TestConfigWithTimeoutBoundsACall(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	slow := roundTrip(func(r *http.Request) (*http.Response, error) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
		return nil, r.Context().Err()
	})
	auth, err := oauth2.NewClient(dingtalkofficial.ConfigWithTimeout(slow, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = auth.GetAccessToken(&oauth2.GetAccessTokenRequest{AppKey: ptr(appKey), AppSecret: ptr(appSecret)})
	// net/http says "Client.Timeout exceeded" or, when the timer's
	// cancel wins the race, "context deadline exceeded".
	if err == nil || !strings.Contains(err.Error(), "Timeout") && !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("a call to a provider that never answers: %v, want the client's timeout", err)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
