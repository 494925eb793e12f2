package providers

import (
	"net/http"
	"strings"
	"testing"
)

func TestFoldPath(t *testing.T) {
	tests := []struct{ in, want string }{
		// Old DingTalk API: no IDs in paths.
		{"/topapi/v2/user/get", "/topapi/v2/user/get"},
		{"/topapi/message/corpconversation/asyncsend_v2", "/topapi/message/corpconversation/asyncsend_v2"},
		{"/gettoken?appkey=k&appsecret=s", "/gettoken"},
		{"/robot/send?access_token=abc123", "/robot/send"},
		{"/user/get#frag", "/user/get"},
		// New DingTalk API: IDs in paths.
		{"/v1.0/contact/users/manager4220", "/v1.0/contact/users/{id}"},
		{"/v1.0/contact/users/0123456789", "/v1.0/contact/users/{id}"},
		{"/v1.0/contact/users/iPiSRG0zFZk1bGiPxNiS3ZdwiEiE/departments", "/v1.0/contact/users/{id}/departments"},
		{"/v1.0/calendar/users/u1234/calendars/primary/events", "/v1.0/calendar/users/{id}/calendars/primary/events"},
		{"/v1.0/oauth2/userAccessToken", "/v1.0/oauth2/userAccessToken"},
		{"/v1.0/robot/oToMessages/batchSend", "/v1.0/robot/oToMessages/batchSend"},
		{"/v1.0/contact/users/me", "/v1.0/contact/users/me"},
		// Other providers.
		{"/sns/oauth2/access_token", "/sns/oauth2/access_token"},
		{"/open-apis/im/v1/messages/om_dc13264520392913993dd051dba21dcf/reply", "/open-apis/im/v1/messages/{id}/reply"},
		{"/open-apis/contact/v3/users/ou_7d8a6e6df7621556ce0d21922b676706ccs", "/open-apis/contact/v3/users/{id}"},
		{"/cgi-bin/message/custom/send", "/cgi-bin/message/custom/send"},
		{"/datacube/getweanalysisappiddailysummarytrend", "/datacube/getweanalysisappiddailysummarytrend"},
		// Shapes of identifiers.
		{"/x/123e4567-e89b-12d3-a456-426614174000", "/x/{id}"},
		{"/x/d41d8cd98f00b204e9800998ecf8427e", "/x/{id}"},
		{"/x/deadbeefcafebabe", "/x/{id}"},
		{"/x/zhang.san@example.com", "/x/{id}"},
		{"/x/zhang.san%40example.com", "/x/{id}"},
		{"/x/+86-13800138000", "/x/{id}"},
		{"/x/2025-01-01", "/x/{id}"},
		{"/x/张三", "/x/{id}"},
		{"/x/a b", "/x/{id}"},
		{"/x/access_token=abc", "/x/{id}"},
		{"/x;access_token=abc/y", "/{id}/y"},
		{"/x/dGhpcyBpcyBhIHRva2Vu==", "/x/{id}"},
		{"/x/QmFzZTY0TGlrZVRva2Vu", "/x/{id}"},
		{"/x/{userId}", "/x/{id}"},
		{"/x/{id}", "/x/{id}"},
		// Kept as written.
		{"", "/"},
		{"/", "/"},
		{"/a//b/", "/a//b/"},
		{"relative/path", "relative/path"},
		{"/v2/x", "/v2/x"},
		{"/oauth2/token", "/oauth2/token"},
		{"/x/..", "/x/.."},
		{"/" + strings.Repeat("a", 65), "/{id}"},
		{"/" + strings.Repeat("x", 64), "/" + strings.Repeat("x", 64)},
	}
	for _, tt := range tests {
		if got := FoldPath(tt.in); got != tt.want {
			t.Errorf("FoldPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFoldPathCut(t *testing.T) {
	long := "/" + strings.Repeat("segment/", 30) + "end"
	got := FoldPath(long)
	if len(got) > maxAPILen || !strings.HasSuffix(got, cutMarker) || !strings.HasPrefix(long, strings.TrimSuffix(got, cutMarker)+"/") {
		t.Fatalf("FoldPath(long) = %q (%d bytes)", got, len(got))
	}
	// A path of exactly maxAPILen is kept whole.
	exact := "/" + strings.Repeat("x", 63) + "/" + strings.Repeat("y", 63)
	if len(exact) != maxAPILen || FoldPath(exact) != exact {
		t.Fatalf("a %d-byte path was changed to %q", len(exact), FoldPath(exact))
	}
}

func TestFoldPathDistinct(t *testing.T) {
	paths := []string{
		"/v1.0/contact/users/manager4220",
		"/v1.0/contact/users/manager4220/departments",
		"/v1.0/contact/users/me",
		"/v1.0/contact/departments/123",
		"/v1.0/contact/departments/123/users",
		"/topapi/v2/user/get",
		"/topapi/v2/user/list",
		"/topapi/user/listid",
		"/user/get",
		"/department/list",
		"/topapi/message/corpconversation/asyncsend_v2",
		"/topapi/message/corpconversation/getsendresult",
		"/v1.0/robot/oToMessages/batchSend",
		"/v1.0/robot/groupMessages/send",
	}
	seen := map[string]string{}
	for _, p := range paths {
		f := FoldPath(p)
		if prev, ok := seen[f]; ok {
			t.Errorf("%q and %q both fold to %q", prev, p, f)
		}
		seen[f] = p
	}
}

func TestFoldPathNoAlloc(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() { _ = FoldPath("/topapi/v2/user/get?access_token=x") })
	if allocs != 0 {
		t.Fatalf("FoldPath of a path with nothing to fold allocated %v times", allocs)
	}
}

func FuzzFoldPath(f *testing.F) {
	for _, s := range []string{
		"/v1.0/contact/users/manager4220/departments",
		"/robot/send?access_token=abc",
		"/x/access_token=abc/y",
		"/" + strings.Repeat("seg/", 40),
		"/a/{id}/...",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := FoldPath(p)
		if len(got) > maxAPILen {
			t.Fatalf("FoldPath(%q) is %d bytes long", p, len(got))
		}
		if strings.Contains(strings.ToLower(got), "access_token=") {
			t.Fatalf("FoldPath(%q) = %q keeps an access token", p, got)
		}
		if strings.ContainsAny(got, "?#") {
			t.Fatalf("FoldPath(%q) = %q keeps a query", p, got)
		}
		if again := FoldPath(got); again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", p, got, again)
		}
		if FoldPath(p) != got {
			t.Fatalf("not deterministic on %q", p)
		}
	})
}

func BenchmarkFoldPath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = FoldPath("/v1.0/contact/users/manager4220/departments")
	}
}

func TestMatchHosts(t *testing.T) {
	match := MatchHosts("oapi.dingtalk.com", "127.0.0.1", "emu.local:8443")
	cases := []struct {
		url  string
		want bool
	}{
		{"https://oapi.dingtalk.com/gettoken", true},
		{"https://OAPI.DingTalk.com/gettoken", true},
		{"https://oapi.dingtalk.com:443/gettoken", true},
		{"http://127.0.0.1:43817/topapi", true},
		{"https://emu.local:8443/x", true},
		{"https://emu.local:9000/x", false},
		{"https://api.dingtalk.com/v1.0", false},
		{"https://evil.oapi.dingtalk.com.example/x", false},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		if got := match(req); got != tc.want {
			t.Errorf("Match(%s) = %v, want %v", tc.url, got, tc.want)
		}
	}
	if match(nil) {
		t.Error("Match(nil) = true")
	}
}
