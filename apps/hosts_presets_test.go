package apps_test

import (
	"net/http"
	"testing"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// The hosts a Book learns from without a profile are the presets' own:
// each preset's default profile handles every one of them.
func TestAppsDefaultHostsAreThePresets(t *testing.T) {
	for name, p := range map[string]providers.Profile{
		dingtalk.Name: dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}}}).Profile(),
		wechat.Name:   wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wx1"}}}).Profile(),
		wecom.Name:    wecom.MustNew(wecom.Config{Apps: []wecom.App{{CorpID: "ww1"}}}).Profile(),
		feishu.Name:   feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: "cli_a"}}}).Profile(),
	} {
		hosts := apps.DefaultHosts(name)
		if len(hosts) == 0 {
			t.Errorf("apps.DefaultHosts(%q) is empty", name)
		}
		for _, h := range hosts {
			req, _ := http.NewRequest(http.MethodGet, "https://"+h+"/open-apis/x", nil)
			if !p.Match(req) {
				t.Errorf("apps.DefaultHosts(%q) has %q, which the preset does not handle", name, h)
			}
		}
	}
}
