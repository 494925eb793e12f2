package providers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// A negative value no longer means "off": the No... fields say it, and a
// negative value is an error naming the field and the switch to use.
func TestPresetsRejectNegativeOffValues(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"dingtalk MonthlyQuota": {newErr(dingtalk.New(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a", MonthlyQuota: -1}}})), "App.MonthlyQuota must not be negative (NoMonthlyQuota"},
		"dingtalk Jitter":       {newErr(dingtalk.New(dingtalk.Config{Jitter: -1, Apps: []dingtalk.App{{AppKey: "a"}}})), "Config.Jitter must not be negative (NoJitter"},
		"wecom PerMember":       {newErr(wecom.New(wecom.Config{Apps: []wecom.App{{CorpID: "ww1", PerMemberPerMinute: -1, PerMemberPerHour: -1}}})), "NoPerMemberLimit"},
		"feishu DefaultLevel":   {newErr(feishu.New(feishu.Config{Apps: []feishu.App{{AppID: "cli_a", DefaultLevel: -1}}})), "App.DefaultLevel must not be negative (NoDefaultLevel"},
		"feishu PerChat":        {newErr(feishu.New(feishu.Config{Apps: []feishu.App{{AppID: "cli_a", PerChat: -1}}})), "App.PerChat must not be negative (NoPerChat"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, tc.err, tc.want)
		}
	}
	for name, err := range map[string]error{
		"dingtalk": newErr(dingtalk.New(dingtalk.Config{NoJitter: true, NoRobotLimit: true, NoMonthGrace: true, Apps: []dingtalk.App{{AppKey: "a", NoMonthlyQuota: true}}})),
		"wecom":    newErr(wecom.New(wecom.Config{Apps: []wecom.App{{CorpID: "ww1", NoPerMemberLimit: true}}})),
		"feishu":   newErr(feishu.New(feishu.Config{Apps: []feishu.App{{AppID: "cli_a", NoDefaultLevel: true, NoPerChat: true}}})),
	} {
		if err != nil {
			t.Errorf("%s: the No... fields: %v", name, err)
		}
	}
}

// Unknown is every app the Config does not list: an ID there would be read
// nowhere, so it is refused rather than ignored.
func TestPresetsRejectAnIDOnUnknown(t *testing.T) {
	for name, err := range map[string]error{
		"wechat": newErr(wechat.New(wechat.Config{Unknown: wechat.App{AppID: "wx9"}, Apps: []wechat.App{{AppID: "wx1"}}})),
		"wecom":  newErr(wecom.New(wecom.Config{Unknown: wecom.App{CorpID: "ww9"}, Apps: []wecom.App{{CorpID: "ww1"}}})),
		"feishu": newErr(feishu.New(feishu.Config{Unknown: feishu.App{AppID: "cli_z"}, Apps: []feishu.App{{AppID: "cli_a"}}})),
	} {
		if err == nil || !strings.Contains(err.Error(), "Config.Unknown.") {
			t.Errorf("%s: %v, want an error naming Config.Unknown", name, err)
		}
	}
}

// One app is a list of one: a request that names no app is that app's.
func TestPresetOfOneAppChargesEveryRequestToIt(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingOnly"}}}).Profile()
	req, _ := http.NewRequest(http.MethodGet, "https://api.dingtalk.com/v1.0/contact/users/u1", nil)
	r, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Scopes[0], "dingOnly") {
		t.Fatalf("scope %q, want the one app's", r.Scopes[0])
	}
}

func newErr[P any](_ P, err error) error { return err }
