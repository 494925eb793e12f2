package throttle_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// ruleKinds pins the kind of every family of rule keys the presets use (a
// key's leading segment, and its second when that is one letter: "corp:m").
// A rule's kind is part of what its key holds in Redis: a release that
// changed a rule's kind under the same key left a fleet half-way through
// the upgrade with no limit on it, each side reading the other's state as
// foreign and starting afresh (60 of 60 calls admitted against 10/min).
// A rule that changes kind takes a new key, and this table changes with it.
var ruleKinds = map[string]string{
	"dingtalk api":    "paced",
	"dingtalk egress": "paced",
	"dingtalk month":  "calendar",
	"dingtalk entity": "window",
	"wechat day":      "calendar",
	"wechat min":      "window",
	"wecom corp:m":    "window",
	"wecom corp:h":    "window",
	"wecom ip:m":      "window",
	"wecom ip:h":      "window",
	"wecom member:m":  "paced",
	"wecom member:h":  "paced",
	"wecom inflight":  "concurrency",
	"feishu s":        "paced",
	"feishu m":        "window",
	"feishu chat":     "paced",
	"feishu month":    "calendar",
}

func kindOf(r rule.Rule) string {
	switch s := r.String(); {
	case r.IsConcurrency():
		return "concurrency"
	case r.Unit() != 0:
		return "calendar"
	case strings.Contains(s, " in any "):
		return "window"
	default:
		return "paced"
	}
}

func keyFamily(key string) string {
	parts := strings.SplitN(key, ":", 3)
	if len(parts) == 3 && len(parts[1]) == 1 {
		return parts[0] + ":" + parts[1]
	}
	return parts[0]
}

func TestRuleKindsKeepTheirKeys(t *testing.T) {
	type call struct {
		method, url, body string
	}
	presets := []struct {
		name    string
		profile providers.Profile
		calls   []call
	}{
		{"dingtalk", dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingapp"}}}).Profile(), []call{
			{http.MethodGet, "https://oapi.dingtalk.com/topapi/v2/user/get?access_token=t", ""},
			{http.MethodPost, "https://oapi.dingtalk.com/robot/send?access_token=robottoken0123456789", `{"msgtype":"text"}`},
		}},
		{"wechat", wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wx0000000000000001"}}}).Profile(), []call{
			{http.MethodPost, "https://api.weixin.qq.com/cgi-bin/message/custom/send?access_token=t", `{}`},
			{http.MethodPost, "https://api.weixin.qq.com/cgi-bin/stable_token", `{"grant_type":"client_credential","appid":"wx0000000000000001","secret":"s"}`},
		}},
		{"wecom", wecom.MustNew(wecom.Config{Apps: []wecom.App{{CorpID: "ww1", MaxInFlight: 4}}}).Profile(), []call{
			{http.MethodGet, "https://qyapi.weixin.qq.com/cgi-bin/user/get?access_token=t&userid=u1", ""},
			{http.MethodPost, "https://qyapi.weixin.qq.com/cgi-bin/message/send?access_token=t", `{"touser":"u1","agentid":1000002,"msgtype":"text"}`},
		}},
		{"feishu", feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: "cli_1", FreeEdition: true}}}).Profile(), []call{
			{http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", ""},
			{http.MethodPost, "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id", `{"receive_id":"oc_1","msg_type":"text","content":"{}"}`},
		}},
	}
	seen := map[string]bool{}
	for _, p := range presets {
		for _, c := range p.calls {
			req, _ := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			route, err := p.profile.Route(req)
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.url, err)
			}
			for _, r := range route.Rules {
				family := p.name + " " + keyFamily(r.Key())
				seen[family] = true
				want, ok := ruleKinds[family]
				switch {
				case !ok:
					t.Errorf("%s (rule %s): a family of keys ruleKinds does not pin; add it with its kind", family, r)
				case kindOf(r) != want:
					t.Errorf("%s (rule %s) is %s, pinned as %s: a rule that changes kind takes a new key", family, r, kindOf(r), want)
				}
			}
		}
	}
	for family := range ruleKinds {
		if !seen[family] {
			t.Errorf("%s: pinned, but no request above routes to it (add one)", family)
		}
	}
}
