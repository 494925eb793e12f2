package apihosts

import (
	"slices"
	"testing"
)

func TestProvider(t *testing.T) {
	for host, want := range map[string]string{
		"api.dingtalk.com":         "dingtalk",
		"OAPI.DingTalk.com.":       "dingtalk",
		"api.dingtalk.com:443":     "dingtalk",
		"qyapi.weixin.qq.com":      "wecom",
		"api.weixin.qq.com":        "wechat",
		"sh.api.weixin.qq.com":     "wechat",
		"open.larksuite.com":       "feishu",
		"api.mch.weixin.qq.com":    "", // WeChat Pay: not an API the presets limit
		"mp.weixin.qq.com":         "",
		"login.dingtalk.com":       "",
		"evilapi.dingtalk.com.com": "",
		"xapi.dingtalk.com":        "", // a suffix counts only after a dot
	} {
		if got := Provider(host); got != want {
			t.Errorf("Provider(%q) = %q, want %q", host, got, want)
		}
	}
	if got, want := Providers(), []string{"wecom", "wechat", "dingtalk", "feishu"}; !slices.Equal(got, want) {
		t.Errorf("Providers() = %q, want %q", got, want)
	}
}
