package wechat_test

// WeChat counts per-minute limits in calendar minutes, which a test of a
// few seconds could never fill, so the emulator runs timeScale times faster
// than the wall clock and holds the API to 1/timeScale of the preset's
// per-minute limit: the same rate. The preset runs its windows as fast
// (Config.TimeScale) with the emulator's limits (see providers/wechat's
// acceptance test).
//
// util.DefaultHTTPClient is process-wide: the tests in this package run one
// after another and each installs its own Transport.

import (
	"strings"
	"testing"

	sdk "github.com/silenceper/wechat/v2"
	"github.com/silenceper/wechat/v2/cache"
	"github.com/silenceper/wechat/v2/officialaccount"
	offconfig "github.com/silenceper/wechat/v2/officialaccount/config"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/wechat"
	presetwechat "github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

const (
	appID, appSecret = "wx1234567890abcdef", "secret"
	openID           = "o6_bmjrPTlm6_2sgVt7hMZOPfL2M"
	userInfo         = "/cgi-bin/user/info"
	timeScale        = 12  // an emulated minute lasts 5 s
	perMinute        = 600 // the preset's limit per real minute: 10/s
)

func newEmulator(t *testing.T) *wechattest.Server {
	emu := wechattest.NewServer(wechattest.Options{
		Apps:      map[string]string{appID: appSecret},
		TimeScale: timeScale,
		Limits:    wechattest.Limits{PerMinute: map[string]int{userInfo: perMinute / timeScale}},
	})
	t.Cleanup(emu.Close)
	return emu
}

// use installs the recipe: the WeChat preset, keyed by the app (here with
// the scaled per-minute limit and no daily quotas), for the whole process.
func use(t *testing.T, emu *wechattest.Server, opts ...throttle.Option) {
	opts = append(opts,
		throttle.WithBase(sdktest.Redirect(emu.URL)),
		throttle.WithProfiles(presetwechat.MustNew(presetwechat.Config{
			TimeScale: timeScale,
			Apps: []presetwechat.App{{
				AppID:           appID,
				NoDefaultQuotas: true,
				PerMinute:       map[string]int{userInfo: perMinute / timeScale},
			}},
		}).Profile()),
	)
	wechat.Use(throttle.MustNew(opts...))
}

func officialAccount() *officialaccount.OfficialAccount {
	return sdk.NewWechat().GetOfficialAccount(&offconfig.Config{
		AppID: appID, AppSecret: appSecret, Cache: cache.NewMemory(),
	})
}

// Four times the per-minute limit's rate at once: every call is answered
// and parsed, and the emulator rejects none.
func TestAboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	use(t, emu)
	user := officialAccount().GetUser()
	if _, err := user.GetAccessToken(); err != nil {
		t.Fatal(err)
	}
	sdktest.NoErrors(t, sdktest.Fire(40, 40, func(int) error {
		_, err := user.GetUserInfo(openID)
		return err
	}))
	if cs := emu.Counters(); cs.OK != cs.Total || cs.Total != 41 {
		t.Fatalf("emulator: %+v, want 41 calls answered with success", cs)
	}
}

func TestErrorsThroughTheSDK(t *testing.T) {
	emu := newEmulator(t)
	use(t, emu, throttle.WithMaxWait(0))
	user := officialAccount().GetUser()
	sdktest.UntilThrottled(t, 1000, func() error { _, err := user.GetUserInfo(openID); return err })

	use(t, emu)
	user = officialAccount().GetUser()
	if _, err := user.GetAccessToken(); err != nil {
		t.Fatal(err)
	}
	// A 45009 closes the API for the app until midnight in Beijing; the SDK
	// reports WeChat's answer as its own error, as it always did.
	emu.Inject(1, 200, `{"errcode":45009,"errmsg":"reach max api daily quota limit"}`)
	if _, err := user.GetUserInfo(openID); err == nil || !strings.Contains(err.Error(), "errcode=45009") {
		t.Fatalf("the quota answer: %v", err)
	}
	_, err := user.GetUserInfo(openID)
	sdktest.Penalized(t, err)
}
