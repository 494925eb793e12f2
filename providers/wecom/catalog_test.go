package wecom

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/internal/routetest"
)

func catalogChecker(t testing.TB) *routetest.Checker {
	return &routetest.Checker{Profile: testProfile(t, Config{Apps: []App{{}}}, nil), Host: "qyapi.weixin.qq.com", Templates: catalogTemplates}
}

// Every template of the catalog, with IDs of every shape in its
// parameters, is its own API, keyed and scoped alike whatever the ID.
func TestRouteByCatalog(t *testing.T) {
	c := catalogChecker(t)
	c.CheckAll(t)
	c.CheckUncatalogued(t, "GET", "/cgi-bin/media/get/", "uncatalogued")
	t.Logf("%d templates from %s", len(catalogTemplates), catalogSources)
}

func FuzzRouteIDs(f *testing.F) { catalogChecker(f).Fuzz(f) }

// BenchmarkRoute routes catalogued paths (with IDs) through the full
// catalog, and one the catalog lacks.
func BenchmarkRoute(b *testing.B) { catalogChecker(b).Bench(b, benchPaths) }

var benchPaths = [][2]string{
	{http.MethodGet, "/cgi-bin/user/get"},
	{http.MethodGet, "/cgi-bin/media/get/zhangsan"},
}

// Config.APIs the catalog lacks become APIs of their own.
func TestRouteConfiguredAPIs(t *testing.T) {
	p := testProfile(t, Config{APIs: []string{"/cgi-bin/brand/new"}, Apps: []App{{}}}, nil)
	for path, api := range map[string]string{"/cgi-bin/brand/new": "/cgi-bin/brand/new", "/cgi-bin/brand/other": "uncatalogued"} {
		r, err := p.Route(&http.Request{Method: "POST", URL: &url.URL{Scheme: "https", Host: "qyapi.weixin.qq.com", Path: path}, Header: http.Header{}})
		if err != nil || r.API != api {
			t.Errorf("%s: %q %v, want %q", path, r.API, err, api)
		}
	}
	if _, err := New(Config{APIs: []string{"/cgi-bin/{id}"}, Apps: []App{{CorpID: "ww1"}}}); err == nil {
		t.Error("a path with a placeholder was accepted")
	}
}

// An app message carries a rule per member named in touser (by hash), or
// one broadcast rule; other APIs carry none.
func TestRouteMemberRules(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}}, nil)
	route := func(path, body string) []string {
		req, _ := http.NewRequest(http.MethodPost, "https://qyapi.weixin.qq.com"+path+"?access_token=T", strings.NewReader(body))
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(req.Body); string(got) != body {
			t.Fatalf("the body reads %q after Route, want %q", got, body)
		}
		var keys []string
		for _, rule := range r.Rules {
			if k := rule.Key(); strings.HasPrefix(k, "member:") {
				keys = append(keys, k)
			}
		}
		return keys
	}
	one := route(memberAPI, `{"touser":"zhangsan","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`)
	if len(one) != 2 || strings.Contains(strings.Join(one, ","), "zhangsan") || !strings.Contains(one[0], ":1000002:") {
		t.Errorf("one member: %q", one)
	}
	if two := route(memberAPI, `{"touser":"zhangsan|lisi","agentid":1000002}`); len(two) != 4 || two[0] != one[0] {
		t.Errorf("two members: %q", two)
	}
	for _, body := range []string{`{"touser":"@all","agentid":1000002}`, `{"toparty":"1|2","agentid":1000002}`, `not json`, ``} {
		if keys := route(memberAPI, body); len(keys) != 2 || !strings.HasSuffix(keys[0], ":"+broadcast) {
			t.Errorf("%q: %q, want the broadcast rules", body, keys)
		}
	}
	if keys := route("/cgi-bin/user/get", `{"touser":"zhangsan"}`); len(keys) != 0 {
		t.Errorf("another API: %q", keys)
	}
}
