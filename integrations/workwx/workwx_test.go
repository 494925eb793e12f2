package workwx_test

// WeCom counts its limits per calendar minute and hour, which a test of a
// few seconds could never fill, so the emulator runs timeScale times faster
// than the wall clock and holds each API to 1/timeScale of the preset's
// per-minute limit: the same rate. The preset runs its windows as fast
// (Config.TimeScale) with the emulator's limits (see providers/wecom's
// acceptance test).

import (
	"errors"
	"testing"

	sdk "github.com/xen0n/go-workwx"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/workwx"
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

const (
	corpID, corpSecret = "ww1234567890abcdef", "secret"
	agentID            = 1000002
	timeScale          = 12  // an emulated minute lasts 5 s
	perMinute          = 600 // the preset's limit per API per real minute: 10/s
)

func newEmulator(t *testing.T) *wecomtest.Server {
	emu := wecomtest.NewServer(wecomtest.Options{
		Corps:     map[string][]string{corpID: {corpSecret}},
		TimeScale: timeScale,
		Limits: wecomtest.Limits{
			CorpPerMinute: perMinute / timeScale,
			CorpPerHour:   150000 / timeScale,
			IPPerMinute:   20000 / timeScale,
			IPPerHour:     600000 / timeScale,
		},
	})
	t.Cleanup(emu.Close)
	return emu
}

// transport is the recipe: the WeCom preset, keyed by the company (here
// with the scaled per-minute limit).
func transport(emu *wecomtest.Server, opts ...throttle.Option) *throttle.Transport {
	opts = append(opts,
		throttle.WithBase(sdktest.Redirect(emu.URL)),
		throttle.WithProfiles(wecom.MustNew(wecom.Config{IPPerMinute: 20000 / timeScale, IPPerHour: 600000 / timeScale, TimeScale: timeScale, Apps: []wecom.App{{CorpID: corpID, CorpPerMinute: perMinute / timeScale, CorpPerHour: 150000 / timeScale}}}).Profile()),
	)
	return throttle.MustNew(opts...)
}

// Four times the per-minute limit's rate at once: every call is answered
// and parsed, and the emulator rejects none.
func TestAboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	app := workwx.New(corpID, transport(emu)).WithApp(corpSecret, agentID)
	sdktest.NoErrors(t, sdktest.Fire(40, 40, func(int) error {
		_, err := app.GetUser("zhangsan")
		return err
	}))
	if cs := emu.Counters(); cs.OK != cs.Total || cs.Total < 41 {
		t.Fatalf("emulator: %+v, want every call and the token answered with success", cs)
	}
}

func TestErrorsThroughTheSDK(t *testing.T) {
	emu := newEmulator(t)
	impatient := workwx.New(corpID, transport(emu, throttle.WithMaxWait(0))).WithApp(corpSecret, agentID)
	sdktest.UntilThrottled(t, 1000, func() error { _, err := impatient.GetUser("zhangsan"); return err })

	app := workwx.New(corpID, transport(emu)).WithApp(corpSecret, agentID)

	// A 45009 closes the API for the company for at least a minute; the
	// SDK reports WeCom's answer as its own error, as it always did.
	emu.Inject(1, 200, `{"errcode":45009,"errmsg":"api freq out of limit, hint: [1700000000_1_abc], from ip: 10.0.0.1"}`)
	_, err := app.GetUser("zhangsan")
	var clientErr *sdk.WorkwxClientError
	if !errors.As(err, &clientErr) || clientErr.Code != 45009 {
		t.Fatalf("the quota answer: %v", err)
	}
	_, err = app.GetUser("zhangsan")
	sdktest.Penalized(t, err)
}
