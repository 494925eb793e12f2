package godingtalk_test

import (
	"testing"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/godingtalk"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

const corpID, corpSecret = "dingcorp", "secret"

func newEmulator(t *testing.T) *dingtalktest.Server {
	emu := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{corpID: corpSecret}})
	t.Cleanup(emu.Close)
	return emu
}

// transport is the recipe: the DingTalk preset, keyed by the app.
func transport(emu *dingtalktest.Server, opts ...throttle.Option) *throttle.Transport {
	opts = append(opts,
		throttle.WithBase(sdktest.Redirect(emu.URL)),
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: corpID}}}).Profile()),
	)
	return throttle.MustNew(opts...)
}

// Three times the per-API limit at once: every call is answered, the SDK
// parses the emulator's user, and the emulator rejects none.
func TestAboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	c := godingtalk.NewClient(corpID, corpSecret, transport(emu))
	if err := c.RefreshAccessToken(true); err != nil {
		t.Fatal(err)
	}
	errs := sdktest.Fire(60, 20, func(int) error {
		u, err := c.UserInfoByUserId("manager4220")
		if err == nil && (u.Userid != "manager4220" || u.Name != "张三" || !u.Active) {
			t.Errorf("user parsed as %+v", u)
		}
		return err
	})
	sdktest.NoErrors(t, errs)
	if st := emu.Stats(); st.Rejected != 0 || st.Bans != 0 || st.Requests != 61 {
		t.Fatalf("emulator: %+v, want 61 requests and no rejection", st)
	}
}

func TestErrorsThroughTheSDK(t *testing.T) {
	emu := newEmulator(t)
	impatient := godingtalk.NewClient(corpID, corpSecret, transport(emu, throttle.WithMaxWait(0)))
	if err := impatient.RefreshAccessToken(true); err != nil {
		t.Fatal(err)
	}
	sdktest.UntilThrottled(t, 1000, func() error { _, err := impatient.UserInfoByUserId("u1"); return err })

	c := godingtalk.NewClient(corpID, corpSecret, transport(emu))
	if err := c.RefreshAccessToken(true); err != nil {
		t.Fatal(err)
	}

	emu.Ban()
	_, _ = c.DepartmentList() // answered with the ban: the preset penalises the egress IP
	_, err := c.UserInfoByUserId("u1")
	sdktest.Penalized(t, err)
	if st := emu.Stats(); st.Rejected != 0 {
		t.Fatalf("emulator: %+v, want no rejection", st)
	}
}
