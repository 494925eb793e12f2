package apps

import (
	"net/http"
	"strings"

	"github.com/quotaware/throttle/internal/apipath"
)

// Where exchanges are learned from. A request to a token path proves
// nothing by itself: any host the Transport passes through can have a
// /gettoken, and an answer from it could name any app and any token. So an
// exchange is learned only when it went to its provider: either the
// Transport matched it to the provider's profile (Resolve marks it,
// sentKey), or its host is one of the provider's (the public hosts, and
// those given in Config.Hosts).

// sentKey marks a request's context with the name of the profile the
// Transport matched it to, for exchanges only.
type sentKey struct{}

// defaultHosts are the providers' public API hosts, as the presets list
// them (a test checks that each preset handles every one).
func defaultHosts() map[string][]string {
	return map[string][]string{
		nameDingTalk: {"oapi.dingtalk.com", "api.dingtalk.com"},
		nameWeChat:   {"api.weixin.qq.com", "api2.weixin.qq.com", "sh.api.weixin.qq.com", "sz.api.weixin.qq.com", "hk.api.weixin.qq.com"},
		nameWeCom:    {"qyapi.weixin.qq.com"},
		nameFeishu:   {"open.feishu.cn", "open.larksuite.com"},
	}
}

// fromProvider reports whether an exchange of provider went to one of the
// provider's hosts: matched by its profile in the Transport, or sent to a
// host the Book knows as the provider's.
func (b *Book) fromProvider(req *http.Request, provider string) bool {
	if p, ok := req.Context().Value(sentKey{}).(string); ok {
		return p == provider
	}
	match := b.hosts[provider]
	return match != nil && match(req)
}

// needsToken reports whether a request a preset of provider routes must
// carry an app's access token, so that one the Book cannot read is counted
// rather than silent. Webhooks (a robot's or bot's own secret names them)
// and the calls made with a suite's, component's or provider's own token
// name no app token.
func needsToken(provider string, req *http.Request) bool {
	p := apipath.Clean(apipath.Sent(req.URL)) // read as the routes read it
	switch provider {
	case nameDingTalk:
		// The ISV's /service/ calls sign with the suite's key; /v1.0/oauth2/
		// holds the exchanges of user and app tokens.
		return p != dingtalkRobot && !strings.HasPrefix(p, "/service/") && !strings.HasPrefix(p, "/v1.0/oauth2/")
	case nameWeCom:
		if strings.HasPrefix(p, "/cgi-bin/webhook/") {
			return false
		}
		fallthrough
	case nameWeChat:
		q := req.URL.RawQuery
		return !strings.Contains(q, "suite_access_token=") && !strings.Contains(q, "provider_access_token=") &&
			!strings.Contains(q, "component_access_token=")
	case nameFeishu:
		return !strings.HasPrefix(p, "/open-apis/bot/v2/hook/") && !strings.HasPrefix(p, "/open-apis/auth/")
	}
	return false
}
