package providers_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// presetsWithHosts builds each preset with the given Hosts.
var presetsWithHosts = map[string]func(hosts []string) error{
	"dingtalk": func(h []string) error {
		_, err := dingtalk.New(dingtalk.Config{Hosts: h, Apps: []dingtalk.App{{AppKey: "app"}}})
		return err
	},
	"feishu": func(h []string) error {
		_, err := feishu.New(feishu.Config{Hosts: h, Apps: []feishu.App{{AppID: "cli_a"}}})
		return err
	},
	"wechat": func(h []string) error {
		_, err := wechat.New(wechat.Config{Hosts: h, Apps: []wechat.App{{AppID: "wx1"}}})
		return err
	},
	"wecom": func(h []string) error {
		_, err := wecom.New(wecom.Config{Hosts: h, Apps: []wecom.App{{CorpID: "ww1"}}})
		return err
	},
	"dingtalk apps": func(h []string) error {
		_, err := dingtalk.New(dingtalk.Config{Hosts: h, Apps: []dingtalk.App{{AppKey: "a"}}})
		return err
	},
	"feishu apps": func(h []string) error {
		_, err := feishu.New(feishu.Config{Hosts: h, Apps: []feishu.App{{AppID: "cli_a"}}})
		return err
	},
	"wechat apps": func(h []string) error {
		_, err := wechat.New(wechat.Config{Hosts: h, Apps: []wechat.App{{AppID: "wx1"}}})
		return err
	},
	"wecom apps": func(h []string) error {
		_, err := wecom.New(wecom.Config{Hosts: h, Apps: []wecom.App{{CorpID: "ww1"}}})
		return err
	},
}

// A preset given another provider's API host would limit that provider's
// requests by its own catalog, and the right preset would match none of
// them: every preset refuses it, naming the field, the host and the preset
// to use, and accepts its own.
func TestPresetsRejectAnotherProvidersHost(t *testing.T) {
	own := map[string]string{
		"dingtalk": "api.dingtalk.com", "feishu": "open.feishu.cn",
		"wechat": "api.weixin.qq.com", "wecom": "qyapi.weixin.qq.com",
	}
	for name, build := range presetsWithHosts {
		provider := strings.Fields(name)[0]
		for other, host := range own {
			err := build([]string{"gateway.internal", host})
			switch {
			case other == provider && err != nil:
				t.Errorf("%s: its own host %q refused: %v", name, host, err)
			case other != provider && (err == nil || !strings.Contains(err.Error(), "Config.Hosts[1]") ||
				!strings.Contains(err.Error(), host) || !strings.Contains(err.Error(), "the "+other+" preset")):
				t.Errorf("%s: %s's host %q: %v, want Config.Hosts[1] refused, naming the host and the %s preset", name, other, host, err, other)
			}
		}
	}
}

// A host pasted as a URL (or with a path, a space, a user) matches no
// request, so the profile would protect nothing without a word: every
// preset refuses it, naming the field and the value.
func TestPresetsRejectHostsThatMatchNothing(t *testing.T) {
	bad := []string{
		"https://api.dingtalk.com", "http://127.0.0.1:43817", "api.dingtalk.com/", "api.dingtalk.com/v1.0",
		" api.dingtalk.com", "api.dingtalk.com ", "api.ding talk.com", "api.dingtalk.com\n", "",
		"user@api.dingtalk.com", "api.dingtalk.com?x=1", "api.dingtalk.com#x", "api.dingtalk.com:",
		"api.dingtalk.com:0", "api.dingtalk.com:70000", "api.dingtalk.com:http", "::1", "[::1", "[not-ip]:80",
		":8080", "钉钉.com",
		// Empty labels: no request's host has one, and matching drops
		// only a single trailing dot.
		".gw.internal", "gw..internal", "gw.internal..", "gw.internal..:8443", ".", "..",
	}
	for name, build := range presetsWithHosts {
		for _, h := range bad {
			err := build([]string{"gateway.internal", h})
			if err == nil {
				t.Errorf("%s: Hosts %q accepted", name, h)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "Config.Hosts[1]") || !strings.Contains(msg, strings.TrimSpace(quoteInner(h))) {
				t.Errorf("%s: Hosts %q: error %q does not name the field and the value", name, h, msg)
			}
		}
	}
	err := presetsWithHosts["dingtalk"]([]string{"https://api.dingtalk.com"})
	if err == nil || !strings.Contains(err.Error(), `write the host alone, "api.dingtalk.com"`) {
		t.Errorf("a URL's error does not say which host to write: %v", err)
	}
}

// quoteInner is how %q writes s, less the quotes.
func quoteInner(s string) string {
	q := strings.TrimSuffix(strings.TrimPrefix(strconv.Quote(s), `"`), `"`)
	return q
}

func TestPresetsAcceptHostsAndPorts(t *testing.T) {
	good := []string{"api.example.com", "API.Example.com", "127.0.0.1", "127.0.0.1:43817", "[::1]", "[::1]:8080", "localhost", "my_host.internal:65535",
		"gw.internal.", "my-gw.internal.:8443"}
	for name, build := range presetsWithHosts {
		for _, h := range good {
			if err := build([]string{h}); err != nil {
				t.Errorf("%s: Hosts %q refused: %v", name, h, err)
			}
		}
	}
	// And what the checked hosts match is unchanged.
	m := providers.MatchHosts(good...)
	for _, u := range []string{"http://api.example.com/x", "http://127.0.0.1:9/x", "http://[::1]:8080/x", "http://my_host.internal:65535/",
		"http://gw.internal/x", "http://my-gw.internal:8443/x"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if !m(req) {
			t.Errorf("%s not matched", u)
		}
	}
}

// A custom profile's MatchHosts panics on an entry that would match no
// request, naming it, rather than leave the profile limiting nothing.
func TestMatchHostsPanicsOnWhatIsNoHost(t *testing.T) {
	for _, h := range []string{"https://api.example.com", " api.example.com", "gw:08443", "gw:0", "api.example.com/v1", "",
		".gw.internal", "gw..internal", "gw.internal..", "."} {
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, "providers.MatchHosts: entry 1") {
					t.Errorf("MatchHosts(..., %q): recovered %v, want a panic naming entry 1", h, r)
				}
			}()
			providers.MatchHosts("api.example.com", h)
		}()
	}
}

// A nil *Preset (a New error ignored) and a zero one (declared, never
// built) answer errors, never panic: a zero one used to panic in Profile.
func TestNilAppsDoNotPanic(t *testing.T) {
	for name, a := range map[string]interface {
		Profile() providers.Profile
	}{
		"dingtalk": (*dingtalk.Preset)(nil), "feishu": (*feishu.Preset)(nil),
		"wechat": (*wechat.Preset)(nil), "wecom": (*wecom.Preset)(nil),
		"zero dingtalk": &dingtalk.Preset{}, "zero feishu": &feishu.Preset{},
		"zero wechat": &wechat.Preset{}, "zero wecom": &wecom.Preset{},
	} {
		p := a.Profile()
		if err := p.Validate(); err == nil {
			t.Errorf("%s: the profile of a nil *Preset validates", name)
		}
	}
	for name, err := range map[string]error{
		"dingtalk":      (*dingtalk.Preset)(nil).Add(dingtalk.App{AppKey: "a"}),
		"feishu":        (*feishu.Preset)(nil).Add(feishu.App{AppID: "cli_a"}),
		"wechat":        (*wechat.Preset)(nil).Add(wechat.App{AppID: "wx1"}),
		"wecom":         (*wecom.Preset)(nil).Add(wecom.App{CorpID: "ww1"}),
		"zero dingtalk": (&dingtalk.Preset{}).Add(dingtalk.App{AppKey: "a"}),
		"zero wechat":   (&wechat.Preset{}).Add(wechat.App{AppID: "wx1"}),
	} {
		if err == nil || !strings.Contains(err.Error(), "nil or zero *Preset") {
			t.Errorf("%s: Add on a nil *Preset: %v", name, err)
		}
	}
}

// Every entry a preset accepts matches the requests to that host: an IPv6
// entry without a port on any port, a trailing dot (the same DNS name) on
// either side, a default port written out against a URL that leaves it
// implicit. Each of these used to be accepted and match nothing, turning
// the protection off with no word but the unmatched-request warning.
func TestMatchHostsEntriesMatchTheirHost(t *testing.T) {
	cases := []struct {
		entry   string
		matches []string
		misses  []string
	}{
		{"[::1]", []string{"http://[::1]:8080/x", "http://[::1]/x"}, []string{"http://[::2]:8080/x"}},
		{"api.dingtalk.com.", []string{"https://api.dingtalk.com/x", "https://api.dingtalk.com./x"}, []string{"https://oapi.dingtalk.com/x"}},
		{"api.dingtalk.com", []string{"https://api.dingtalk.com./x", "https://API.DingTalk.com:8443/x"}, nil},
		{"api.dingtalk.com:443", []string{"https://api.dingtalk.com/x", "https://api.dingtalk.com:443/x", "https://api.dingtalk.com.:443/x"}, []string{"http://api.dingtalk.com/x", "https://api.dingtalk.com:8443/x"}},
		{"127.0.0.1:80", []string{"http://127.0.0.1/x"}, []string{"https://127.0.0.1/x", "http://127.0.0.1:8080/x"}},
		{"[::1]:8080", []string{"http://[::1]:8080/x"}, []string{"http://[::1]/x", "http://[::1]:8081/x"}},
	}
	for _, tc := range cases {
		m := providers.MatchHosts(tc.entry)
		for _, u := range tc.matches {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			if !m(req) {
				t.Errorf("MatchHosts(%q) does not match %s", tc.entry, u)
			}
		}
		for _, u := range tc.misses {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			if m(req) {
				t.Errorf("MatchHosts(%q) matches %s", tc.entry, u)
			}
		}
	}
}

// A profile's name is the limiter's group, inside its Redis keys' hash
// tag: a brace in it is refused where the profile is checked.
func TestProfileNameWithBraceRefused(t *testing.T) {
	ok := func(*http.Request) bool { return true }
	route := func(*http.Request) (providers.Route, error) { return providers.Route{}, nil }
	for _, name := range []string{"a}b", "{a"} {
		p := providers.Profile{Name: name, Match: ok, Route: route}
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "Profile.Name") {
			t.Errorf("name %q: %v, want an error naming Profile.Name", name, err)
		}
	}
}
