package wechat

import (
	"net/http"
	"testing"

	"github.com/quotaware/throttle/providers/internal/routetest"
)

func catalogChecker(t testing.TB) *routetest.Checker {
	return &routetest.Checker{Profile: testProfile(t, Config{Apps: []App{{}}}), Host: "api.weixin.qq.com", Templates: catalogTemplates}
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
	{http.MethodGet, "/cgi-bin/user/info"},
	{http.MethodGet, "/cgi-bin/media/get/zhangsan"},
}
