package dingtalk

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/internal/routetest"
)

func catalogChecker(t testing.TB) *routetest.Checker {
	return &routetest.Checker{Profile: testProfile(t, Config{Apps: []App{{}}}), Host: "oapi.dingtalk.com", Templates: catalogTemplates}
}

// Every template of the catalog, with IDs of every shape in its
// parameters, is its own API, keyed and scoped alike whatever the ID.
func TestRouteByCatalog(t *testing.T) {
	c := catalogChecker(t)
	c.CheckAll(t)
	c.CheckUncatalogued(t, "GET", "/v9.9/contact/users/", "uncatalogued")
	t.Logf("%d templates from %s", len(catalogTemplates), catalogSources)
}

func FuzzRouteIDs(f *testing.F) { catalogChecker(f).Fuzz(f) }

// BenchmarkRoute routes catalogued paths (with IDs) through the full
// catalog, and one the catalog lacks.
func BenchmarkRoute(b *testing.B) { catalogChecker(b).Bench(b, benchPaths) }

var benchPaths = [][2]string{
	{http.MethodGet, "/v1.0/contact/users/zhangsan"},
	{http.MethodPost, "/topapi/v2/user/get"},
	{http.MethodGet, "/v1.0/crm/officialAccounts/oToMessages/sendResults"},
	{http.MethodGet, "/v9.9/not/catalogued/zhangsan"},
}

// Config.APIs the catalog lacks become APIs of their own, metered when
// MeteredPaths names them; a metered path that is no API of either is
// refused (a typo left the real API off the month's count).
func TestRouteConfiguredAPIs(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{APIs: []string{"GET /v9.9/new/things/{id}", "/topapi/brand/new", "/topapi/metered/new"}, MeteredPaths: []string{"/topapi/metered/new"}}}})
	for _, tc := range []struct{ method, path, api string }{
		{"GET", "/v9.9/new/things/zhangsan", "GET /v9.9/new/things/{id}"},
		{"GET", "/v9.9/new/things/liSiSi", "GET /v9.9/new/things/{id}"},
		{"POST", "/v9.9/new/things/zhangsan", "uncatalogued"},
		{"POST", "/topapi/brand/new", "/topapi/brand/new"},
		{"POST", "/topapi/metered/new", "/topapi/metered/new"},
	} {
		r, err := p.Route(&http.Request{Method: tc.method, URL: &url.URL{Scheme: "https", Host: "oapi.dingtalk.com", Path: tc.path}, Header: http.Header{}})
		if err != nil || r.API != tc.api || r.Uncatalogued != (tc.api == "uncatalogued") {
			t.Errorf("%s %s: %q %v %v, want %q", tc.method, tc.path, r.API, r.Uncatalogued, err, tc.api)
		}
		if tc.path == "/topapi/metered/new" && r.Scope("monthly") == "" {
			t.Errorf("%s: not metered: %q", tc.path, r.Scopes)
		}
	}
	if _, err := New(Config{Apps: []App{{AppKey: "dingapp", APIs: []string{"get /x"}}}}); err == nil {
		t.Error("a template with a lower-case method was accepted")
	}
	_, err := New(Config{Apps: []App{{AppKey: "dingapp", MeteredPaths: []string{"/v1.0/contact/userz/{unionId}"}}}})
	if err == nil || !strings.Contains(err.Error(), "MeteredPaths") || !strings.Contains(err.Error(), "userz") {
		t.Errorf("a metered path that is no API: %v, want an error naming it", err)
	}
	if _, err := New(Config{Apps: []App{{AppKey: "dingapp", MeteredPaths: []string{"/v1.0/contact/users/{unionId}", "/topapi/v2/user/get"}}}}); err != nil {
		t.Errorf("catalogued metered paths: %v", err)
	}
}
