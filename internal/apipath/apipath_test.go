package apipath

import "testing"

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
