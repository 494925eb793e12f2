package catalog

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/quotaware/throttle/internal/apipath"
)

func TestLookup(t *testing.T) {
	c := MustNew(
		"GET /v1.0/contact/users/{unionId}",
		"GET /v1.0/contact/users/{unionId}/departments",
		"POST /v1.0/contact/users/search",
		"DELETE /v1.0/contact/users/{userId}/x",
		"GET /a/{id}/b/c",
		"GET /a/{id}/b/{other}",
		"GET /a/static/b/d",
		"/topapi/v2/user/get",
		"POST /open-apis/im/v1/messages/:message_id/reply",
		"/",
	)
	tests := []struct{ method, path, want string }{
		{"GET", "/v1.0/contact/users/zhangsan", "GET /v1.0/contact/users/{unionId}"},
		{"GET", "/v1.0/contact/users/liSiSi/departments", "GET /v1.0/contact/users/{unionId}/departments"},
		{"GET", "/v1.0/contact/users/search", "GET /v1.0/contact/users/{unionId}"}, // GET has no literal "search"
		{"POST", "/v1.0/contact/users/search", "POST /v1.0/contact/users/search"},
		{"POST", "/v1.0/contact/users/zhangsan", ""},
		{"DELETE", "/v1.0/contact/users/u1/x", "DELETE /v1.0/contact/users/{userId}/x"},
		{"GET", "/a/static/b/c", "GET /a/{id}/b/c"}, // the literal branch dead-ends: back off to the parameter
		{"GET", "/a/static/b/d", "GET /a/static/b/d"},
		{"GET", "/a/x/b/zz", "GET /a/{id}/b/{other}"},
		{"POST", "/topapi/v2/user/get", "/topapi/v2/user/get"},
		{"GET", "/topapi/v2/user/get/", "/topapi/v2/user/get"},
		// Repeated slashes are one, and dot segments resolved, as the
		// providers' front ends read them.
		{"GET", "/topapi/v2/user/get//", "/topapi/v2/user/get"},
		{"GET", "/topapi/./v2/user/get", "/topapi/v2/user/get"},
		{"GET", "/topapi/x/../v2/user/get", "/topapi/v2/user/get"},
		{"GET", "/../topapi/v2/user/get/.", "/topapi/v2/user/get"},
		{"GET", "//topapi/v2/user/get", "/topapi/v2/user/get"},
		{"GET", "/v1.0//contact/users/zhangsan", "GET /v1.0/contact/users/{unionId}"},
		{"GET", "/topapi/v2/user", ""},
		{"GET", "/topapi/v2/user/get/more", ""},
		{"POST", "/open-apis/im/v1/messages/om_1/reply", "POST /open-apis/im/v1/messages/:message_id/reply"},
		{"POST", "/open-apis/im/v1/messages//reply", ""},
		{"GET", "/", "/"},
		{"GET", "", ""},
		{"GET", "relative", ""},
	}
	for _, tc := range tests {
		got := ""
		if a := c.Lookup(tc.method, tc.path); a != nil {
			got = a.Name
		}
		if got != tc.want {
			t.Errorf("Lookup(%s %q) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	if c.Len() != 10 {
		t.Errorf("Len %d", c.Len())
	}
	var nilCatalog *Catalog
	if nilCatalog.Lookup("GET", "/") != nil {
		t.Error("a nil catalog matched")
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct{ templates []string }{
		{[]string{"get /x"}},
		{[]string{"x"}},
		{[]string{"GET x"}},
		{[]string{"/a//b"}},
		{[]string{"/a?b"}},
		{[]string{"GET /a/{x}", "GET /a/:y"}},
		{[]string{"/a", "/a"}},
		// Never the path Lookup compares: it resolves dot segments and
		// reads the path decoded.
		{[]string{"/a/./b"}},
		{[]string{"GET /a/../b"}},
		{[]string{"/a/b/."}},
		{[]string{"/a/%62"}},
		{[]string{"/a/b%2Fc"}},
		{[]string{"//"}},
	} {
		if _, err := New(tc.templates...); err == nil {
			t.Errorf("New(%q) accepted", tc.templates)
		}
	}
	if _, err := New("GET /a/{x}", "POST /a/{y}", "/a/{z}"); err != nil {
		t.Errorf("methods apart: %v", err)
	}
	if _, err := New("POST /open-apis/message/v4/batch_send/", "/a.b/c..d/.e"); err != nil {
		t.Errorf("a trailing slash, dots inside segments: %v", err)
	}
}

func TestCheckPath(t *testing.T) {
	for _, p := range []string{"/", "/cgi-bin/token", "/cgi-bin/token/", "/v1.0/a.b/..c/d.", "/a/{id}", "relative"} {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
	for p, want := range map[string]string{
		"/cgi-bin/./message/mass/sendall": `"." or ".." segment: write "/cgi-bin/message/mass/sendall"`,
		"/wxa/x/../msg_sec_check":         `"." or ".." segment: write "/wxa/msg_sec_check"`,
		"/cgi-bin/token/.":                `"." or ".." segment: write "/cgi-bin/token"`,
		"/..":                             `"." or ".." segment: write "/"`,
		"/a//b":                           `empty segment: write "/a/b"`,
		"/a//":                            `empty segment: write "/a"`,
		"//":                              `empty segment: write "/"`,
		"/cgi-bin/%74oken":                "'%'",
		"/a/b%2Fc":                        "'%'",
	} {
		if err := CheckPath(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPath(%q) = %v, want an error saying %s", p, err, want)
		}
	}
	// What CheckPath accepts, Lookup finds as written, whatever a request
	// adds of what the front ends ignore.
	for _, p := range []string{"/cgi-bin/token", "/cgi-bin/token/", "/a.b/c"} {
		c := MustNew(p)
		for _, req := range []string{p, "/" + p, p + "/", strings.TrimSuffix(p, "/"), "/x/.." + p} {
			if a := c.Lookup("GET", req); a == nil || a.Name != p {
				t.Errorf("template %q: Lookup(%q) = %v", p, req, a)
			}
		}
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	c := MustNew("GET /v1.0/contact/users/{unionId}/departments", "/topapi/v2/user/get")
	allocs := testing.AllocsPerRun(100, func() {
		c.Lookup("GET", "/v1.0/contact/users/zhangsan/departments")
		c.Lookup("POST", "/topapi/v2/user/get")
		c.Lookup("POST", "/unknown/path/zhangsan")
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocated %v times", allocs)
	}
}

// FuzzLookup: whatever the path, Lookup returns a template of the catalog
// or nil, never panics, and a template's own path finds itself.
func FuzzLookup(f *testing.F) {
	templates := []string{"GET /v1.0/users/{id}", "GET /v1.0/users/{id}/x", "POST /v1.0/users/search", "/a/:b/c", "/"}
	c := MustNew(templates...)
	for _, s := range []string{"/v1.0/users/zhangsan", "/v1.0/users//x", "/a/%2F/c", "//", "/v1.0/users/search/", "/.", "/v1.0/./users/x/.."} {
		f.Add("GET", s)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		a := c.Lookup(method, path)
		if a == nil {
			return
		}
		found := false
		for _, tpl := range templates {
			found = found || a.Name == tpl
		}
		if !found || a.Method != "" && a.Method != method {
			t.Fatalf("Lookup(%q, %q) = %+v", method, path, a)
		}
		// The path as the front ends read it (apipath.Clean: slashes
		// merged, dot segments resolved) has the template's segments.
		merged := apipath.Clean(path)
		if strings.Count(strings.TrimSuffix(merged, "/"), "/") != strings.Count(strings.TrimSuffix(a.Path, "/"), "/") && merged != "/" {
			t.Fatalf("Lookup(%q, %q) = %q: another number of segments", method, path, a.Name)
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	var ts []string
	for i := range 3000 {
		ts = append(ts, fmt.Sprintf("GET /v1.0/svc%d/things/{id}/part%d", i%60, i))
	}
	c := MustNew(ts...)
	b.ReportAllocs()
	for b.Loop() {
		c.Lookup("GET", "/v1.0/svc17/things/zhangsan/part1457")
	}
}

func TestPathOf(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h/v1.0/users/a%2Fb":     "/v1.0/users/a%2Fb",
		"https://h/v1.0/users/a%2fb":     "/v1.0/users/a%2fb",
		"https://h/v1.0/users/%E5%BC%A0": "/v1.0/users/张",
		"https://h/v1.0/users/plain":     "/v1.0/users/plain",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := PathOf(u); got != want {
			t.Errorf("PathOf(%s) = %q, want %q", raw, got, want)
		}
	}
}

// PathOf reads the path net/http sends, which is not always u.Path or
// u.RawPath: a RawPath left stale by a change to Path is not sent, and
// with Opaque set Opaque is the path sent.
func TestPathOfAsSent(t *testing.T) {
	tests := []struct {
		name string
		edit func(u *url.URL)
		want string
	}{
		{"stale RawPath", func(u *url.URL) { u.Path = "/cgi-bin/message/mass/sendall" }, "/cgi-bin/message/mass/sendall"},
		{"stale RawPath, lower-case escape", func(u *url.URL) { u.RawPath = "/base%2fx"; u.Path = "/v1.0/users/x" }, "/v1.0/users/x"},
		{"RawPath set by hand", func(u *url.URL) { u.Path, u.RawPath = "/v1.0/users/a/b", "/v1.0/users/a%2Fb" }, "/v1.0/users/a%2Fb"},
		{"Opaque with the host", func(u *url.URL) { u.Opaque = "//h/cgi-bin/message/mass/sendall" }, "/cgi-bin/message/mass/sendall"},
		{"Opaque with another host", func(u *url.URL) { u.Opaque = "//proxy.internal:8080/cgi-bin/token" }, "/cgi-bin/token"},
		{"Opaque without a host", func(u *url.URL) { u.Opaque = "/cgi-bin/token" }, "/cgi-bin/token"},
		{"Opaque escaped", func(u *url.URL) { u.Opaque = "//h/v1.0/users/%E5%BC%A0" }, "/v1.0/users/张"},
		{"Opaque escaping a slash", func(u *url.URL) { u.Opaque = "//h/v1.0/users/a%2Fb" }, "/v1.0/users/a%2Fb"},
		{"Opaque with a query", func(u *url.URL) { u.Opaque = "//h/cgi-bin/token?x=/y" }, "/cgi-bin/token"},
		{"Opaque of the host alone", func(u *url.URL) { u.Opaque = "//h" }, "/"},
		{"Opaque badly escaped", func(u *url.URL) { u.Opaque = "/a%zz" }, "/a%zz"},
		{"Opaque not a path", func(u *url.URL) { u.Opaque = "x@y" }, "x@y"},
	}
	for _, tc := range tests {
		u, err := url.Parse("https://h/base%2Fx?access_token=t")
		if err != nil {
			t.Fatal(err)
		}
		tc.edit(u)
		if got := PathOf(u); got != tc.want {
			t.Errorf("%s: PathOf(%#v) = %q, want %q", tc.name, u, got, tc.want)
		}
		// What net/http writes on the request line (RequestURI), less
		// the scheme and host of the absolute form and the query, is
		// what PathOf reads, decoded but for an escaped '/'.
		sent, _, _ := strings.Cut(u.RequestURI(), "?")
		for _, origin := range []string{"https://h", "https://proxy.internal:8080"} {
			if rest, ok := strings.CutPrefix(sent, origin); ok {
				sent = cmp.Or(rest, "/")
			}
		}
		if dec, err := url.PathUnescape(sent); err == nil && !strings.Contains(strings.ToLower(sent), "%2f") {
			sent = dec
		}
		if sent != tc.want {
			t.Errorf("%s: net/http sends %q, PathOf reads %q", tc.name, u.RequestURI(), tc.want)
		}
	}
}

func TestPathOfAllocatesNothing(t *testing.T) {
	plain, _ := url.Parse("https://h/v1.0/users/plain?x=1")
	escaped, _ := url.Parse("https://h/v1.0/users/%E5%BC%A0")
	opaque := &url.URL{Scheme: "https", Opaque: "//h/v1.0/users/plain"}
	if n := testing.AllocsPerRun(100, func() { PathOf(plain); PathOf(escaped); PathOf(opaque) }); n != 0 {
		t.Errorf("PathOf allocated %v times", n)
	}
}
