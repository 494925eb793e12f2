package hostcheck

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, h := range []string{"api.dingtalk.com", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:443", "my_gateway.internal"} {
		if err := Check(h); err != nil {
			t.Errorf("Check(%q) = %v, want nil", h, err)
		}
	}
	for h, want := range map[string]string{
		"":                         "empty",
		"https://api.dingtalk.com": `"api.dingtalk.com"`,
		"api.dingtalk.com/v1.0":    "path",
		"user@host":                "user",
		"a b":                      "spaces",
		"host:":                    "empty port",
		"host:0":                   "port",
		"host:99999":               "port",
		"::1":                      "brackets",
		"[::1":                     "[IPv6]",
		"钉钉.com":                   "ASCII",
		// Entries are matched as text: these could never match.
		"api.dingtalk.com:0443": "leading zero",
		"[0:0:0:0:0:0:0:1]":     `"[::1]"`,
		"[0:0::1]:8080":         `"[::1]:8080"`,
	} {
		if err := Check(h); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want an error saying %q", h, err, want)
		}
	}
}

func TestAllNamesTheFieldAndEntry(t *testing.T) {
	if err := All("Config.Hosts", "dingtalk", nil); err == nil || !strings.Contains(err.Error(), "Config.Hosts") {
		t.Errorf("no hosts: %v", err)
	}
	err := All("Config.Hosts", "dingtalk", []string{"api.dingtalk.com", "https://oapi.dingtalk.com"})
	if err == nil || !strings.Contains(err.Error(), "Config.Hosts[1]") || !strings.Contains(err.Error(), `"oapi.dingtalk.com"`) {
		t.Errorf("a URL entry: %v", err)
	}
}

func TestAllRefusesAnotherProvidersHost(t *testing.T) {
	for _, hosts := range [][]string{{"api.dingtalk.com", "oapi.dingtalk.com", "127.0.0.1:8080", "gateway.internal"}, {"API.DingTalk.com."}} {
		if err := All("Config.Hosts", "dingtalk", hosts); err != nil {
			t.Errorf("dingtalk with %q: %v", hosts, err)
		}
	}
	for host, other := range map[string]string{
		"qyapi.weixin.qq.com":    "wecom",
		"sh.api.weixin.qq.com":   "wechat",
		"OPEN.FEISHU.CN":         "feishu",
		"open.larksuite.com:443": "feishu",
	} {
		err := All("Config.Hosts", "dingtalk", []string{"api.dingtalk.com", host})
		if err == nil || !strings.Contains(err.Error(), "Config.Hosts[1]") || !strings.Contains(err.Error(), "the "+other+" preset") {
			t.Errorf("dingtalk with %q: %v, want Config.Hosts[1] refused, naming the %s preset", host, err, other)
		}
	}
}
