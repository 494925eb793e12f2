package dingtalk

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/internal/routetest"
)

// An App.APIs entry is compared with a request's path as DingTalk reads
// it ("." and ".." resolved, escapes decoded): an entry written otherwise
// named no request, its API's rules applying to nothing. New refuses it,
// naming the field and the entry.
func TestAPIsWrittenAsNoRequestIsRead(t *testing.T) {
	for api, want := range map[string]string{
		"GET /v1.0/./contact/things/{id}": `"." or ".." segment: write "/v1.0/contact/things/{id}"`,
		"/topapi/x/../brand/new":          `"." or ".." segment: write "/topapi/brand/new"`,
		"/topapi/brand/new/.":             `"." or ".." segment: write "/topapi/brand/new"`,
		"/topapi//brand/new":              `empty segment: write "/topapi/brand/new"`,
		"/topapi/brand/%6Eew":             "'%'",
		"GET /v1.0/things/a%2Fb":          "'%'",
	} {
		_, err := New(Config{Apps: []App{{AppKey: "dingapp", APIs: []string{"/topapi/fine", api}}}})
		if err == nil || !strings.Contains(err.Error(), "App.APIs") || !strings.Contains(err.Error(), fmt.Sprintf("%q", api)) ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("APIs %q: %v, want an error naming App.APIs and the entry, saying %s", api, err, want)
		}
	}
	if _, err := New(Config{Apps: []App{{AppKey: "dingapp", APIs: []string{"/topapi/brand/new/", "GET /v1.0/a.b/..c/{id}"}}}}); err != nil {
		t.Errorf("plain entries: %v", err)
	}
}

// A request is routed by the path net/http sends: a stale RawPath or a
// path in Opaque routed a catalogued API as uncatalogued.
func TestRouteReadsThePathAsSent(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{APIs: []string{"/topapi/brand/new"}}}})
	for _, tc := range []struct{ method, target string }{
		{"POST", topURL},
		{"GET", oldURL},
		{"GET", "https://api.dingtalk.com/v1.0/contact/users/zhangsan"},
		{"POST", "https://oapi.dingtalk.com/topapi/brand/new?access_token=tok"},
		{"GET", "https://api.dingtalk.com/v9.9/not/catalogued"},
	} {
		routetest.RoutesAsSent(t, p, tc.method, tc.target)
	}
}
