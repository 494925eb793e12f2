// Package apihosts knows which provider each known API host belongs to.
// The Transport uses it to notice a provider's request that no profile
// matched, and the presets to refuse another provider's host in their
// Hosts: one table, so the two never disagree.
package apihosts

import (
	"net"
	"strings"
)

// known are the API hosts of the providers the presets know (a suffix
// covers its subdomains: WeChat's sh.api., sz.api. and hk.api.). The
// providers' other hosts are not APIs the presets limit (WeChat Pay's
// api.mch., mp., open.; DingTalk's login.), so they are left out: whole
// domains raised the unmatched alert, a critical one, for every payment a
// service made.
var known = []struct{ suffix, provider string }{
	{"qyapi.weixin.qq.com", "wecom"},
	{"api.weixin.qq.com", "wechat"},
	{"api2.weixin.qq.com", "wechat"},
	{"oapi.dingtalk.com", "dingtalk"},
	{"api.dingtalk.com", "dingtalk"},
	{"open.feishu.cn", "feishu"},
	{"open.larksuite.com", "feishu"},
	{"open.larkoffice.com", "feishu"},
}

// Provider names the provider whose API host host is ("host" or
// "host:port", any case, with or without a trailing dot), or "".
func Provider(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, d := range known {
		if host == d.suffix || strings.HasSuffix(host, "."+d.suffix) {
			return d.provider
		}
	}
	return ""
}

// Providers lists the providers of the known hosts, each once.
func Providers() []string {
	var names []string
	for i, d := range known {
		if i == 0 || known[i-1].provider != d.provider {
			names = append(names, d.provider)
		}
	}
	return names
}
