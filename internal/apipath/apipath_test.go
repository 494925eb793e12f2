package apipath

import (
	"cmp"
	"net/url"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"/cgi-bin/token":             "/cgi-bin/token",
		"//cgi-bin/token":            "/cgi-bin/token",
		"/cgi-bin//token/":           "/cgi-bin/token",
		"/topapi/./v2/user/get":      "/topapi/v2/user/get",
		"/topapi/x/../v2/user/get//": "/topapi/v2/user/get",
		"/../a":                      "/a",
		"/":                          "/",
		"":                           "",
		"relative/./x":               "relative/./x",
		"/a.b/c":                     "/a.b/c",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Clean("/v1.0/contact/users/x") }); n != 0 {
		t.Errorf("Clean of a clean path allocates %v times, want 0", n)
	}
}

func TestSent(t *testing.T) {
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
		if got := Sent(u); got != want {
			t.Errorf("Sent(%s) = %q, want %q", raw, got, want)
		}
	}
}

// Sent reads the path net/http sends, which is not always u.Path or
// u.RawPath: a RawPath left stale by a change to Path is not sent, and
// with Opaque set Opaque is the path sent.
func TestSentIsWhatNetHTTPSends(t *testing.T) {
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
		{"Opaque in absolute form", func(u *url.URL) { u.Opaque = "http://h/cgi-bin/token" }, "/cgi-bin/token"},
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
		if got := Sent(u); got != tc.want {
			t.Errorf("%s: Sent(%#v) = %q, want %q", tc.name, u, got, tc.want)
		}
		// What net/http writes on the request line (RequestURI), less
		// the scheme and host of the absolute form and the query, is
		// what Sent reads, decoded but for an escaped '/'.
		sent, _, _ := strings.Cut(u.RequestURI(), "?")
		for _, origin := range []string{"https://h", "https://proxy.internal:8080", "http://h"} {
			if rest, ok := strings.CutPrefix(sent, origin); ok {
				sent = cmp.Or(rest, "/")
			}
		}
		if dec, err := url.PathUnescape(sent); err == nil && !strings.Contains(strings.ToLower(sent), "%2f") {
			sent = dec
		}
		if sent != tc.want {
			t.Errorf("%s: net/http sends %q, Sent reads %q", tc.name, u.RequestURI(), tc.want)
		}
	}
}

func TestSentAllocatesNothing(t *testing.T) {
	plain, _ := url.Parse("https://h/v1.0/users/plain?x=1")
	escaped, _ := url.Parse("https://h/v1.0/users/%E5%BC%A0")
	opaque := &url.URL{Scheme: "https", Opaque: "//h/v1.0/users/plain"}
	if n := testing.AllocsPerRun(100, func() { Sent(plain); Sent(escaped); Sent(opaque) }); n != 0 {
		t.Errorf("Sent allocated %v times", n)
	}
}
