package providers_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
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
		// Turned off, a negative value is still refused, as DingTalk's is;
		// a deployment-wide field is named as such, not as Config.Unknown.
		"wechat Jitter":     {newErr(wechat.New(wechat.Config{NoJitter: true, Jitter: -time.Second, Apps: []wechat.App{{AppID: "wx1"}}})), "wechat: Config.Jitter must be within (0, 1m] (NoJitter"},
		"wechat DayGrace":   {newErr(wechat.New(wechat.Config{NoDayGrace: true, DayGrace: -time.Second, Apps: []wechat.App{{AppID: "wx1"}}})), "wechat: Config.DayGrace must be within"},
		"wecom Jitter":      {newErr(wecom.New(wecom.Config{NoJitter: true, Jitter: -time.Second, Apps: []wecom.App{{CorpID: "ww1"}}})), "wecom: Config.Jitter must be within (0, 1m] (NoJitter"},
		"feishu MonthGrace": {newErr(feishu.New(feishu.Config{NoMonthGrace: true, MonthGrace: -time.Second, Apps: []feishu.App{{AppID: "cli_a"}}})), "feishu: Config.MonthGrace must be within"},
		"feishu Jitter":     {newErr(feishu.New(feishu.Config{NoJitter: true, Jitter: -time.Second, Apps: []feishu.App{{AppID: "cli_a"}}})), "(NoJitter: none)"},
		"dingtalk NoJitter": {newErr(dingtalk.New(dingtalk.Config{NoJitter: true, Jitter: -1, Apps: []dingtalk.App{{AppKey: "a"}}})), "Config.Jitter must not be negative (NoJitter"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) || strings.Contains(tc.err.Error(), "Config.Unknown") {
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

// Every default that zero stands for has a No... switch for none, and a
// value given and turned off is off, as in DingTalk's: WeChat's and WeCom's
// Jitter and DayGrace, and Feishu's MonthGrace, had none, so an exact
// window or no grace could not be asked for.
func TestPresetsTurnDefaultsOff(t *testing.T) {
	const api = "/cgi-bin/user/info"
	minuteWindow := func(p providers.Profile, url string) time.Duration {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, rl := range r.Rules {
			if d := rl.Period(); d >= time.Minute && d < time.Minute+time.Second {
				return d
			}
		}
		t.Fatalf("%s: no minute window in %v", url, r.Rules)
		return 0
	}
	wechatApp := []wechat.App{{AppID: "wx1", PerMinute: map[string]int{api: 100}}}
	for _, c := range []struct {
		cfg  wechat.Config
		want time.Duration
	}{
		{wechat.Config{Apps: wechatApp}, time.Minute + 50*time.Millisecond},
		{wechat.Config{Apps: wechatApp, NoJitter: true}, time.Minute},
		{wechat.Config{Apps: wechatApp, NoJitter: true, Jitter: time.Second}, time.Minute},
	} {
		if got := minuteWindow(wechat.MustNew(c.cfg).Profile(), "https://api.weixin.qq.com"+api+"?openid=o"); got != c.want {
			t.Errorf("wechat NoJitter %v Jitter %v: minute window %v, want %v", c.cfg.NoJitter, c.cfg.Jitter, got, c.want)
		}
	}
	wecomApp := []wecom.App{{CorpID: "ww1"}}
	for _, c := range []struct {
		cfg  wecom.Config
		want time.Duration
	}{
		{wecom.Config{Apps: wecomApp}, time.Minute + 50*time.Millisecond},
		{wecom.Config{Apps: wecomApp, NoJitter: true, Jitter: time.Second}, time.Minute},
	} {
		if got := minuteWindow(wecom.MustNew(c.cfg).Profile(), "https://qyapi.weixin.qq.com/cgi-bin/user/get?userid=u"); got != c.want {
			t.Errorf("wecom NoJitter %v Jitter %v: minute window %v, want %v", c.cfg.NoJitter, c.cfg.Jitter, got, c.want)
		}
	}
	// WeChat's 45009 ends at midnight plus DayGrace: none with NoDayGrace.
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	midnight := time.Date(2026, 3, 1, 16, 0, 0, 0, time.UTC) // 00:00 in Beijing
	for _, c := range []struct {
		cfg  wechat.Config
		want time.Time
	}{
		{wechat.Config{Apps: wechatApp}, midnight.Add(5 * time.Second)},
		{wechat.Config{Apps: wechatApp, NoDayGrace: true, DayGrace: 10 * time.Second}, midnight},
	} {
		c.cfg.Clock = func() time.Time { return now }
		p := wechat.MustNew(c.cfg).Profile()
		req, _ := http.NewRequest(http.MethodGet, "https://api.weixin.qq.com"+api+"?openid=o", nil)
		r, _ := p.Route(req)
		resp := &http.Response{StatusCode: 200, ContentLength: -1, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"errcode":45009,"errmsg":"reach max api daily quota limit"}`))}
		if v := p.Classify(req, resp, &r); !v.Until.Equal(c.want) {
			t.Errorf("wechat NoDayGrace %v: a 45009 ends %v, want %v", c.cfg.NoDayGrace, v.Until, c.want)
		}
	}
	if _, err := feishu.New(feishu.Config{NoMonthGrace: true, Apps: []feishu.App{{AppID: "cli_a"}}}); err != nil {
		t.Errorf("feishu NoMonthGrace: %v", err)
	}
}
