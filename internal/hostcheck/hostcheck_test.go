package hostcheck

import (
	"fmt"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, h := range []string{"api.dingtalk.com", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:443", "my_gateway.internal",
		"api.dingtalk.com.", "gw.internal.:8443", "my-gw.internal", "x", "1.2.3.4.",
		"gw-.internal", "-gw.internal"} { // a container's name may end in '-'
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
		// Only one trailing dot is dropped when matching, and no
		// request's host has an empty label: these too match nothing.
		".gw.internal":       "empty label",
		"gw..internal":       "empty label",
		"gw.internal..":      "empty label",
		"gw.internal..:8443": "empty label",
		".":                  "empty label",
		"..":                 "empty label",
		".:8443":             "empty label",
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

// The error of an entry with an empty label names the field and quotes
// the entry, as for any other entry refused.
func TestAllNamesAnEmptyLabel(t *testing.T) {
	for i, hosts := range [][]string{{".gw.internal"}, {"gw.internal", "gw..internal:8443"}} {
		err := All("Config.Hosts", "dingtalk", hosts)
		want := fmt.Sprintf("Config.Hosts[%d] must not have an empty label", i)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", hosts[i])) {
			t.Errorf("All(%q) = %v, want an error saying %q and quoting the entry", hosts, err, want)
		}
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
