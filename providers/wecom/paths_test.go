package wecom

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/routetest"
)

// A Config.APIs entry is compared with a request's path as WeCom reads it
// ("." and ".." resolved, escapes decoded): an entry written otherwise
// named no request. New refuses it, naming the field and the entry.
func TestAPIsWrittenAsNoRequestIsRead(t *testing.T) {
	for api, want := range map[string]string{
		"/cgi-bin/./brand/new":     `"." or ".." segment: write "/cgi-bin/brand/new"`,
		"/cgi-bin/x/../brand/new":  `"." or ".." segment: write "/cgi-bin/brand/new"`,
		"/cgi-bin/brand/new/..":    `"." or ".." segment: write "/cgi-bin/brand"`,
		"/cgi-bin//brand/new":      `empty segment: write "/cgi-bin/brand/new"`,
		"/cgi-bin/brand/%6Eew":     "'%'",
		"/cgi-bin/brand/new%2Fold": "'%'",
	} {
		_, err := New(Config{APIs: []string{"/cgi-bin/fine", api}, Apps: []App{{CorpID: "ww1"}}})
		field := fmt.Sprintf("Config.APIs[1]: want an API path such as /cgi-bin/user/get, got %q", api)
		if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), want) {
			t.Errorf("APIs %q: %v, want an error saying %q and %s", api, err, field, want)
		}
	}
	if _, err := New(Config{APIs: []string{"/cgi-bin/brand/new/", "/cgi-bin/a.b/..c"}, Apps: []App{{CorpID: "ww1"}}}); err != nil {
		t.Errorf("plain entries: %v", err)
	}
}

// A request is routed by the path net/http sends: a stale RawPath or a
// path in Opaque routed a catalogued API as uncatalogued.
func TestRouteReadsThePathAsSent(t *testing.T) {
	p := testProfile(t, Config{APIs: []string{"/cgi-bin/brand/new"}, Apps: []App{{}}}, &fakeClock{t: time.Unix(1741581296, 0)})
	for _, tc := range []struct{ method, target string }{
		{"GET", "https://qyapi.weixin.qq.com/cgi-bin/user/get?access_token=T&userid=zhangsan"},
		{"POST", "https://qyapi.weixin.qq.com/cgi-bin/brand/new?access_token=T"},
		{"GET", "https://qyapi.weixin.qq.com/cgi-bin/media/get/zhangsan"},
	} {
		if want := routetest.RoutesAsSent(t, p, tc.method, tc.target); want.Uncatalogued && !strings.Contains(tc.target, "media/get") {
			t.Errorf("%s: uncatalogued", tc.target)
		}
	}
}
