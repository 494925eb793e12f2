package providers_test

import (
	"math"
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

// A TimeScale that is not a finite number of at least 1 is refused, naming
// the field: +Inf was accepted and shrank every minute and hour window to
// nothing, and NaN was refused with an error naming another field.
func TestTimeScaleMustBeFinite(t *testing.T) {
	for _, scale := range []float64{math.Inf(1), math.NaN(), 0.5, -1} {
		_, errWeChat := wechat.New(wechat.Config{TimeScale: scale})
		_, errWeCom := wecom.New(wecom.Config{TimeScale: scale})
		for name, err := range map[string]error{"wechat": errWeChat, "wecom": errWeCom} {
			if err == nil || !strings.Contains(err.Error(), "Config.TimeScale") {
				t.Errorf("%s TimeScale %v: %v, want an error naming Config.TimeScale", name, scale, err)
			}
		}
	}
}

// An invalid app names its entry and field, with the preset's name once
// ("wecom: Config.Apps[0]: App.CorpPerMinute ..."): the preset's name came
// twice, and WeCom named its App fields as Config's.
func TestAppErrorsNameTheEntryOnce(t *testing.T) {
	_, errWeCom := wecom.New(wecom.Config{Apps: []wecom.App{{CorpID: "ww1", CorpPerMinute: -1}}})
	_, errDing := dingtalk.New(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a", PerAPIRate: -1}}})
	_, errWeChat := wechat.New(wechat.Config{Apps: []wechat.App{{AppID: "wx 1"}}})
	_, errFeishu := feishu.New(feishu.Config{Apps: []feishu.App{{AppID: ""}}})
	for want, err := range map[string]error{
		"wecom: Config.Apps[0]: App.CorpPerMinute ": errWeCom,
		"dingtalk: Config.Apps[0]: App.PerAPIRate ": errDing,
		"wechat: Config.Apps[0]: App.AppID ":        errWeChat,
		"feishu: Config.Apps[0]: App.AppID ":        errFeishu,
	} {
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("got %v, want it to start %q", err, want)
		}
	}
}

// Validate refuses a profile that cannot work, naming the field.
func TestProfileValidateNamesTheField(t *testing.T) {
	good := func() providers.Profile {
		return providers.Profile{Name: "p", Match: func(*http.Request) bool { return true },
			Route: func(*http.Request) (providers.Route, error) { return providers.Route{}, nil }}
	}
	if p := good(); p.Validate() != nil {
		t.Fatalf("a good profile: %v", p.Validate())
	}
	for field, mutate := range map[string]func(*providers.Profile){
		"Name":           func(p *providers.Profile) { p.Name = "a{b}" },
		"Match":          func(p *providers.Profile) { p.Match = nil },
		"Route":          func(p *providers.Profile) { p.Route = nil },
		"DefaultPenalty": func(p *providers.Profile) { p.DefaultPenalty = -time.Second },
		"MaxPenalty":     func(p *providers.Profile) { p.MaxPenalty = -time.Second },
		"Jitter":         func(p *providers.Profile) { p.Jitter = -time.Millisecond },
		"DefaultPenalty (2h0m0s) must not exceed MaxPenalty": func(p *providers.Profile) {
			p.DefaultPenalty, p.MaxPenalty = 2*time.Hour, time.Hour
		},
		"QuotaCheck.Every": func(p *providers.Profile) {
			p.QuotaCheck = &providers.QuotaCheck{Every: time.Millisecond}
		},
	} {
		p := good()
		mutate(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("bad %s: %v, want an error naming it", field, err)
		}
	}
}
