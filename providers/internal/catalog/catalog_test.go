package catalog

import (
	"fmt"
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
