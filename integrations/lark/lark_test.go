package lark_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	sdklark "github.com/larksuite/oapi-sdk-go/v3"
	larkcontact "github.com/larksuite/oapi-sdk-go/v3/service/contact/v3"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/lark"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

const appID, appSecret = "cli_a1b2c3", "secret"

func newEmulator(t *testing.T) *feishutest.Server {
	emu := feishutest.NewServer(feishutest.Options{Apps: map[string]string{appID: appSecret}})
	t.Cleanup(emu.Close)
	return emu
}

// transport is the recipe: the Feishu preset, keyed by the app.
func transport(emu *feishutest.Server, opts ...throttle.Option) *throttle.Transport {
	opts = append(opts,
		throttle.WithBase(sdktest.Redirect(emu.URL)),
		throttle.WithProfiles(feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: appID}}}).Profile()),
	)
	return throttle.MustNew(opts...)
}

func getUser(c *sdklark.Client) error {
	resp, err := c.Contact.V3.User.Get(context.Background(),
		larkcontact.NewGetUserReqBuilder().UserId("ou_7d8a6e6df7621556ce0d21922b676706ccs").Build())
	if err != nil {
		return err
	}
	if !resp.Success() || resp.Msg != "success" || resp.Data == nil {
		return fmt.Errorf("answer parsed as code %d %q, data %v", resp.Code, resp.Msg, resp.Data)
	}
	return nil
}

// More than the default level's 50 calls per second at once (the level's
// 1,000 per minute paces them): every call is answered and parsed, and the
// emulator rejects none.
func TestAboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	c := lark.NewClient(appID, appSecret, transport(emu))
	sdktest.NoErrors(t, sdktest.Fire(60, 30, func(int) error { return getUser(c) }))
	if cs := emu.Counters(); cs.OK != cs.Total || cs.Total < 61 { // the SDK fetches a token per worker at first
		t.Fatalf("emulator: %+v, want every call and the token answered with success", cs)
	}
}

func TestErrorsThroughTheSDK(t *testing.T) {
	emu := newEmulator(t)
	impatient := lark.NewClient(appID, appSecret, transport(emu, throttle.WithMaxWait(0)))
	sdktest.UntilThrottled(t, 1000, func() error { return getUser(impatient) })

	c := lark.NewClient(appID, appSecret, transport(emu))

	// The free edition's monthly quota: the preset closes the app until
	// the 1st of next month, and the SDK sees Feishu's answer as it was.
	emu.Inject(1, http.StatusTooManyRequests, nil,
		`{"code":99991403,"msg":"request trigger tenant monthly quota limit"}`)
	resp, err := c.Contact.V3.User.Get(context.Background(), larkcontact.NewGetUserReqBuilder().UserId("ou_1").Build())
	if err != nil || resp.Code != 99991403 {
		t.Fatalf("the quota answer: %v, %+v", err, resp)
	}
	sdktest.Penalized(t, getUser(c))
	if cs := emu.Counters(); cs.ByCode[feishutest.CodeFrequency] != 0 {
		t.Fatalf("emulator: %+v, want no frequency rejection", cs)
	}
}
