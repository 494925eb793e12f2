package feishu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/internal/routetest"
)

// An App.APIs key is compared with a request's path as Feishu reads it
// ("." and ".." resolved, escapes decoded): a key written otherwise named
// no request, its level applying to nothing. New refuses it, naming the
// field and the key.
func TestAPIKeysWrittenAsNoRequestIsRead(t *testing.T) {
	for key, want := range map[string]string{
		"POST /open-apis/./im/v1/messages":       `"." or ".." segment: write "/open-apis/im/v1/messages"`,
		"GET /open-apis/x/../calendar/v4/x":      `"." or ".." segment: write "/open-apis/calendar/v4/x"`,
		"GET /open-apis/calendar/v4/calendars/.": `"." or ".." segment: write "/open-apis/calendar/v4/calendars"`,
		"GET /open-apis//calendar/v4/calendars":  `empty segment: write "/open-apis/calendar/v4/calendars"`,
		"GET /open-apis/calendar/v4/%63alendars": "'%'",
		"GET /open-apis/x/a%2Fb":                 "'%'",
	} {
		_, err := New(Config{Apps: []App{{AppID: app, APIs: map[string]int{key: 4}}}})
		field := fmt.Sprintf("App.APIs[%q]: the key must read", key)
		if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), want) {
			t.Errorf("APIs[%q]: %v, want an error saying %q and %s", key, err, field, want)
		}
	}
	// A trailing slash is how the catalog lists some APIs: it stays.
	if _, err := New(Config{Apps: []App{{AppID: app, APIs: map[string]int{"POST /open-apis/message/v4/batch_send/": 4, "GET /open-apis/a.b/..c": 4}}}}); err != nil {
		t.Errorf("plain keys: %v", err)
	}
}

// A request is matched and routed by the path net/http sends: with the
// path in Opaque, URL.Path is empty and the request went out unmatched,
// with no limit at all; a stale RawPath routed a catalogued API as
// uncatalogued.
func TestMatchAndRouteReadThePathAsSent(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{DefaultLevel: 5, APIs: map[string]int{"GET /open-apis/x/:id": 1}}}})
	for _, tc := range []struct{ method, target string }{
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id"},
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages/om_aaa/reply"}, // its message's own rule
		{"GET", "https://open.feishu.cn/open-apis/calendar/v4/calendars"},
		{"GET", "https://open.larksuite.com/open-apis/x/7"},
		{"GET", "https://open.feishu.cn/open-apis/not/catalogued"},
	} {
		routetest.RoutesAsSent(t, p, tc.method, tc.target)
	}
	// Opaque outside /open-apis/ is no API of the open platform.
	other := request("GET", "https://open.feishu.cn/")
	other.URL.Opaque = "//open.feishu.cn/other/api"
	if p.Match(other) {
		t.Error("Opaque //open.feishu.cn/other/api matched")
	}
}
