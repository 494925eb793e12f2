package dingtalk

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// now is 2025-03-10 14:30:15.250 in Beijing.
var now = time.Date(2025, 3, 10, 14, 30, 15, 250e6, penaltytime.Beijing())

func testProfile(t testing.TB, cfg Config) providers.Profile {
	t.Helper()
	if len(cfg.Apps) == 0 {
		cfg.Apps = []App{{}}
	}
	if cfg.Apps[0].AppKey == "" {
		cfg.Apps[0].AppKey = "dingapp"
	}
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return now }
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p.Profile()
}

func answer(status int, ct, body string) *http.Response {
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1}
}

func request(method, rawURL string) *http.Request {
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		panic(err)
	}
	return req
}

const (
	oldURL   = "https://oapi.dingtalk.com/user/get?access_token=tok&userid=u1"
	topURL   = "https://oapi.dingtalk.com/topapi/v2/user/get?access_token=tok"
	newURL   = "https://api.dingtalk.com/v1.0/contact/users/manager4220"
	robotURL = "https://oapi.dingtalk.com/robot/send?access_token=robottoken"
	json     = "application/json;charset=UTF-8"
	html     = "text/html; charset=utf-8"
)

func TestClassify(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	nextSec := now.Truncate(time.Second).Add(time.Second)
	backedOff := now.Add(time.Second) // the first step of Config.Escalation
	nextMin := time.Date(2025, 3, 10, 14, 31, 0, 0, penaltytime.Beijing())
	nextMonth := time.Date(2025, 4, 1, 0, 0, 0, 0, penaltytime.Beijing()).Add(defaultMonthGrace)
	stated := time.Date(2025, 3, 10, 14, 30, 17, 0, penaltytime.Beijing())
	var (
		apiOld = "api:dingapp:/user/get"
		apiTop = "api:dingapp:/topapi/v2/user/get"
		apiNew = "api:dingapp:/v1.0/contact/users/{unionId}"
		// DingTalk's limit on all callers of an API stops every app's.
		callersOld = "callers:/user/get"
		callersNew = "callers:/v1.0/contact/users/{unionId}"
		app        = "app:dingapp"
		egress     = "egress:default"
		monthly    = "monthly:dingapp"
		zero       time.Time
		banUntil   = now.Add(defaultIPBanPenalty)
		robotUntl  = now.Add(defaultRobotPenalty)
	)
	tests := []struct {
		name   string
		url    string
		status int
		ct     string
		body   string
		kind   providers.Kind
		scope  string
		until  time.Time
		code   string
		notPr  bool
	}{
		// Success, including look-alikes that carry limit codes as data.
		{"ok", oldURL, 200, json, `{"errcode":0,"errmsg":"ok","userid":"u1"}`, providers.OK, "", zero, "", false},
		{"ok with digits", oldURL, 200, json, `{"errcode":0,"errmsg":"ok","id":90018}`, providers.OK, "", zero, "", false},
		{"ok code as data", newURL, 200, json, `{"code":"Forbidden.AccessDenied.x","userid":"u"}`, providers.OK, "", zero, "", false},
		{"ok numeric code", newURL, 200, json, `{"code":90018,"name":"n"}`, providers.OK, "", zero, "", false},
		{"ok nested errcode", oldURL, 200, json, `{"result":{"errcode":90018},"errcode":0}`, providers.OK, "", zero, "", false},
		{"ok message mentions limit", oldURL, 200, json, `{"errcode":0,"errmsg":"90018 处罚将在 2025-03-10 14:30:17 结束"}`, providers.OK, "", zero, "", false},
		{"ok new api", newURL, 200, json, `{"userid":"manager4220","name":"张三"}`, providers.OK, "", zero, "", false},
		{"ok binary", oldURL, 200, "image/png", "\x89PNG", providers.OK, "", zero, "", false},
		{"ok empty", newURL, 204, "", "", providers.OK, "", zero, "", false},
		{"ok html without markers", oldURL, 200, html, `<html>hello</html>`, providers.OK, "", zero, "", false},
		// A page or file whose text speaks of punishment is no ban.
		{"ok html of punishment", oldURL, 200, html, `<h1>Team rules</h1> Late commits carry no punishment.`, providers.OK, "", zero, "", false},
		{"ok text of punishment", oldURL, 200, "text/plain", `<p>punish</p>`, providers.OK, "", zero, "", false},
		{"ok status field", oldURL, 200, json, `{"errcode":0,"status":1111}`, providers.OK, "", zero, "", false},
		{"truncated code", oldURL, 200, json, `{"errcode":9001`, providers.OK, "", zero, "", false},

		// The old API's per-app, per-API limit.
		{"90018 with end", oldURL, 200, json, `{"errcode":90018,"errmsg":"您的服务器调用钉钉开放平台当前接口的所有请求都被暂时禁用了, 处罚将在 2025-03-10 14:30:17 结束."}`,
			providers.Quota, apiOld, stated, "90018", true},
		{"90018 without end", oldURL, 200, json, `{"errcode":90018,"errmsg":"当前应用调用该接口的并发量已经超过限制"}`, providers.Quota, apiOld, nextSec, "90018", true},
		{"90018 end already past", oldURL, 200, json, `{"errcode":90018,"errmsg":"处罚将在 2025-03-10 14:30:00 结束."}`, providers.Quota, apiOld, nextSec, "90018", true},
		{"90018 string errcode", oldURL, 200, json, `{"errcode":"90018","errmsg":"x"}`, providers.Quota, apiOld, nextSec, "90018", true},
		{"88 wrapper 90018", topURL, 200, json, `{"errcode":88,"sub_code":"90018","sub_msg":"请求总次数超过了 300 次, 处罚将在 2025-03-10 14:30:17 结束.","errmsg":"ding talk error[subcode=90018,submsg=...]","request_id":"5imjny7u9xwa"}`,
			providers.Quota, apiTop, stated, "90018", true},
		{"88 wrapper numeric sub_code", topURL, 200, json, `{"errcode":88,"sub_code":90018,"errmsg":"x"}`, providers.Quota, apiTop, nextSec, "90018", true},
		{"88 wrapper end in errmsg", topURL, 200, json, `{"errcode":88,"sub_code":"90018","sub_msg":"too fast","errmsg":"限制将在 2025-03-10 14:30:17 结束"}`, providers.Quota, apiTop, stated, "90018", true},
		{"88 wrapper other", topURL, 200, json, `{"errcode":88,"sub_code":"60011","sub_msg":"没有调用该接口的权限"}`, providers.Fatal, "", zero, "60011", false},
		{"88 without sub_code", topURL, 200, json, `{"errcode":88,"errmsg":"鉴权异常"}`, providers.Fatal, "", zero, "88", false},

		// Other frequency codes.
		{"90002", oldURL, 200, json, `{"errcode":90002,"errmsg":"您的服务器调用钉钉开放平台当前接口的所有请求都被暂时禁用了"}`, providers.Quota, callersOld, backedOff, "90002", true},
		{"90001", oldURL, 200, json, `{"errcode":90001,"errmsg":"all suspended"}`, providers.Quota, egress, zero, "90001", true},
		{"90003", oldURL, 200, json, `{"errcode":90003,"errmsg":"x"}`, providers.Quota, app, zero, "90003", true},
		{"90004", oldURL, 200, json, `{"errcode":90004,"errmsg":"x"}`, providers.Quota, app, zero, "90004", true},
		{"90005", oldURL, 200, json, `{"errcode":90005,"errmsg":"x"}`, providers.Quota, apiOld, nextMin, "90005", true},
		{"90006", oldURL, 200, json, `{"errcode":90006,"errmsg":"x"}`, providers.Quota, apiOld, nextMin, "90006", true},
		{"90007 internal app", oldURL, 200, json, `{"errcode":90007,"errmsg":"x"}`, providers.Quota, app, nextMin, "90007", true},
		{"90008", oldURL, 200, json, `{"errcode":90008,"errmsg":"x"}`, providers.Quota, apiOld, nextMin, "90008", true},
		{"90009", oldURL, 200, json, `{"errcode":90009,"errmsg":"x"}`, providers.Quota, app, nextMin, "90009", true},
		{"90010", oldURL, 200, json, `{"errcode":90010,"errmsg":"x"}`, providers.Quota, apiOld, nextMin, "90010", true},
		{"90011", oldURL, 200, json, `{"errcode":90011,"errmsg":"x"}`, providers.Quota, app, nextMin, "90011", true},
		{"90012", oldURL, 200, json, `{"errcode":90012,"errmsg":"x"}`, providers.Quota, apiOld, nextMin, "90012", true},
		{"90013", oldURL, 200, json, `{"errcode":90013,"errmsg":"x"}`, providers.Quota, app, nextMin, "90013", true},
		{"90014", oldURL, 200, json, `{"errcode":90014,"errmsg":"x"}`, providers.Quota, apiOld, nextMin, "90014", true},
		{"90015", oldURL, 200, json, `{"errcode":90015,"errmsg":"x"}`, providers.Quota, apiOld, nextSec, "90015", true},
		{"90016", oldURL, 200, json, `{"errcode":90016,"errmsg":"x"}`, providers.Quota, apiOld, nextSec, "90016", true},
		{"90017", oldURL, 200, json, `{"errcode":90017,"errmsg":"x"}`, providers.Quota, egress, zero, "90017", true},
		{"90019", oldURL, 200, json, `{"errcode":90019,"errmsg":"x"}`, providers.Quota, apiOld, nextSec, "90019", true},
		{"90020 unmetered path", "https://oapi.dingtalk.com/user/getx?access_token=t", 200, json, `{"errcode":90020,"errmsg":"x"}`, providers.Quota, "api:dingapp:uncatalogued", nextMonth, "90020", true},
		{"90020 metered path", oldURL, 200, json, `{"errcode":90020,"errmsg":"当月调用量已超过上限"}`, providers.Quota, monthly, nextMonth, "90020", true},
		{"90021 is not a limit", oldURL, 200, json, `{"errcode":90021,"errmsg":"x"}`, providers.Fatal, "", zero, "90021", false},
		{"robot 410100", robotURL, 200, json, `{"errcode":410100,"errmsg":"send too fast, exceed 20 times per minute"}`, providers.Quota, "entity:robot#", robotUntl, "410100", true},

		// The new API.
		{"qps app api", newURL, 403, json, `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi","message":"The request has exceeded the QPS limit of the appkey and api: apiPath(/v1.0/contact/users/manager4220)","requestid":"R1"}`,
			providers.Quota, apiNew, nextSec, "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", true},
		{"qpm app api", newURL, 403, json, `{"code":"Forbidden.AccessDenied.QpmLimitForAppkeyAndApi","message":"m","requestid":"R"}`, providers.Quota, apiNew, nextMin, "Forbidden.AccessDenied.QpmLimitForAppkeyAndApi", true},
		{"qps api", newURL, 403, json, `{"code":"Forbidden.AccessDenied.QpsLimitForApi","message":"m"}`, providers.Quota, callersNew, backedOff, "Forbidden.AccessDenied.QpsLimitForApi", true},
		{"org month", newURL, 403, json, `{"code":"Forbidden.AccessDenied.ApiCountLimitForOrg","message":"m"}`, providers.Quota, monthly, nextMonth, "Forbidden.AccessDenied.ApiCountLimitForOrg", true},
		{"isv qps", newURL, 403, json, `{"code":"Forbidden.AccessDenied.QpsLimitForSuitekeyAndOrgAndApi","message":"m"}`, providers.Quota, apiNew, nextSec, "Forbidden.AccessDenied.QpsLimitForSuitekeyAndOrgAndApi", true},
		{"isv qpm", newURL, 403, json, `{"code":"Forbidden.AccessDenied.QpmLimitForSuitekeyAndOrgAndApi","message":"m"}`, providers.Quota, apiNew, nextMin, "Forbidden.AccessDenied.QpmLimitForSuitekeyAndOrgAndApi", true},
		{"no permission", newURL, 403, json, `{"code":"Forbidden.AccessDenied.AccessTokenPermissionDenied","message":"没有调用该接口的权限"}`, providers.Fatal, "", zero, "Forbidden.AccessDenied.AccessTokenPermissionDenied", false},
		{"ip whitelist", newURL, 403, json, `{"code":"Forbidden.AccessDenied.IpNotInWhiteList","message":"m"}`, providers.Fatal, "", zero, "Forbidden.AccessDenied.IpNotInWhiteList", false},
		{"bare 403", newURL, 403, json, `{"code":"Forbidden","message":"m"}`, providers.Fatal, "", zero, "Forbidden", false},
		{"invalid token", newURL, 401, json, `{"code":"InvalidAuthentication","message":"不合法的access_token"}`, providers.Fatal, "", zero, "InvalidAuthentication", false},

		// Busy and transient.
		{"-1 busy", oldURL, 200, json, `{"errcode":-1,"errmsg":"系统繁忙"}`, providers.Transient, "", zero, "-1", true},
		{"429 system.busy", newURL, 429, json, `{"code":"system.busy","message":"系统繁忙"}`, providers.Transient, "", zero, "system.busy", true},
		{"429 systemBusy", newURL, 429, json, `{"code":"systemBusy","message":"m"}`, providers.Transient, "", zero, "systemBusy", true},
		{"503", newURL, 503, "", ``, providers.Transient, "", zero, "Service Unavailable", false},
		{"504 html", newURL, 504, html, `<html>Gateway Timeout</html>`, providers.Transient, "", zero, "Gateway Timeout", false},
		{"500 json", newURL, 500, json, `{"code":"ServiceUnavailable","message":"m"}`, providers.Transient, "", zero, "ServiceUnavailable", false},

		// The egress IP ban.
		{"ban json", oldURL, 200, json, `{"status":1111,"wait":5,"source":"x5","punish":"deny","uuid":"abc"}`, providers.Quota, egress, banUntil, codeIPBan, true},
		{"ban json no type", newURL, 403, "", `{"status":1111,"wait":5,"source":"x5","punish":"deny"}`, providers.Quota, egress, banUntil, codeIPBan, true},
		{"ban html", oldURL, 200, html, `<!DOCTYPE html><html><head><meta name="aplus-x5sec"></head><body><script>window._config_={"action":"deny","url":"/_____tmd_____/punish"}</script></body></html>`,
			providers.Quota, egress, banUntil, codeIPBan, true},
		{"ban html 403 with markers", newURL, 403, html, `<html><body><div id="x5sec">您的访问过于频繁</div></body></html>`, providers.Quota, egress, banUntil, codeIPBan, true},
		// Any other HTML 403 or 429 comes from a proxy or firewall in front
		// of the API: transient, never the ban.
		{"proxy html 403", newURL, 403, html, `<html><body>Forbidden</body></html>`, providers.Transient, "", zero, "403", true},
		{"waf html 429", oldURL, 429, html, `<html><title>访问被拒绝</title><body>Too many requests</body></html>`, providers.Transient, "", zero, "429", true},
		{"untyped html 403", oldURL, 403, "", `<!DOCTYPE html><html>Access denied</html>`, providers.Transient, "", zero, "403", true},
		{"html 502", newURL, 502, html, `<html>Bad Gateway</html>`, providers.Transient, "", zero, "Bad Gateway", false},
		{"status 1111 alone", oldURL, 200, json, `{"status":1111,"name":"x"}`, providers.OK, "", zero, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request("GET", tt.url)
			resp := answer(tt.status, tt.ct, tt.body)
			v := routedClassify(p, req, resp)
			if v.Kind != tt.kind || v.Code != tt.code || v.NotProcessed != tt.notPr {
				t.Fatalf("verdict %+v, want kind %v code %q notProcessed %v", v, tt.kind, tt.code, tt.notPr)
			}
			// A rate limit's refusal is billed against no month; the
			// month's own refusal and every other answer keep their slot.
			month := tt.code == "90020" || tt.code == "Forbidden.AccessDenied.ApiCountLimitForOrg"
			if want := tt.kind == providers.Quota && !month; v.Unbilled != want {
				t.Fatalf("Unbilled = %v, want %v", v.Unbilled, want)
			}
			if tt.kind == providers.Quota {
				if !strings.HasPrefix(v.Scope, tt.scope) || tt.scope != "entity:robot#" && v.Scope != tt.scope {
					t.Fatalf("scope %q, want %q", v.Scope, tt.scope)
				}
				if !v.Until.Equal(tt.until) {
					t.Fatalf("until %v, want %v", v.Until, tt.until)
				}
				// Only an end read from the message is DingTalk's own
				// instant, shared as it is.
				if want := tt.until.Equal(stated); v.Stated != want {
					t.Fatalf("Stated = %v, want %v", v.Stated, want)
				}
				if r, err := p.Route(req); err != nil || !contains(r.Scopes, v.Scope) && v.Scope != monthly && !strings.HasPrefix(tt.name, "90020") {
					t.Fatalf("scope %q is not among the route's %q (%v)", v.Scope, r.Scopes, err)
				}
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != tt.body {
				t.Fatalf("caller read %q, %v; want the original body", got, err)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestClassifyISV(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{AppKey: "suite1", ISV: true, CorpID: "dingcorp"}}})
	req := request("GET", oldURL)
	for code, scope := range map[string]string{
		"90019": "api:suite1@dingcorp:/user/get",
		"90007": "org:suite1@dingcorp",
		"90013": "org:suite1@dingcorp",
		"90009": "app:suite1",
	} {
		v := routedClassify(p, req, answer(200, json, `{"errcode":`+code+`,"errmsg":"x"}`))
		if v.Kind != providers.Quota || v.Scope != scope {
			t.Errorf("%s: verdict %+v, want quota on %s", code, v, scope)
		}
		r, _ := p.Route(req)
		if !contains(r.Scopes, v.Scope) {
			t.Errorf("%s: scope %s not in route scopes %q", code, v.Scope, r.Scopes)
		}
	}
}

// A Retry-After given as an HTTP date is read against Config.Clock, not the
// machine's clock: the test clock is in 2025, so a date 30 s after it is
// long past by time.Now and would give no hint at all.
// The global per-API error (90002, QpsLimitForApi) comes back at the top
// of the hour: its penalty backs off 1 s, 2 s, then 4 s as the docs advise,
// and starts again after a quiet spell. It used to end at the next
// wall-clock second, a millisecond away at xx:xx:15.999.
func TestGlobalLimitBacksOff(t *testing.T) {
	at := now.Truncate(time.Second).Add(999 * time.Millisecond)
	p := testProfile(t, Config{Apps: []App{{}}, Clock: func() time.Time { return at }})
	classify := func(url string, status int, body string) time.Time {
		t.Helper()
		v := routedClassify(p, request("GET", url), answer(status, json, body))
		if v.Kind != providers.Quota {
			t.Fatalf("%s: %v, want a quota", body, v.Kind)
		}
		return v.Until
	}
	old := `{"errcode":90002,"errmsg":"busy"}`
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		until := classify(oldURL, 200, old)
		if got := until.Sub(at); got != want {
			t.Fatalf("90002 number %d: penalty %v, want %v", i+1, got, want)
		}
		at = until.Add(500 * time.Millisecond) // comes back soon after the end
	}
	at = at.Add(time.Minute)
	if got := classify(oldURL, 200, old).Sub(at); got != time.Second {
		t.Fatalf("after a quiet minute: %v, want 1s again", got)
	}
	// The new API's code climbs its own API's ladder.
	nw := `{"code":"Forbidden.AccessDenied.QpsLimitForApi","message":"m"}`
	first := classify(newURL, 403, nw)
	at = first.Add(time.Millisecond)
	if got := classify(newURL, 403, nw).Sub(at); got != 2*time.Second {
		t.Fatalf("QpsLimitForApi again: %v, want 2s", got)
	}
	// The per-app limit still ends at the next second.
	if got := classify(oldURL, 200, `{"errcode":90018,"errmsg":"m"}`); !got.Equal(at.Truncate(time.Second).Add(time.Second)) {
		t.Fatalf("90018: until %v, want the next second", got)
	}
}

// A global per-API error another replica met, heard here
// (Profile.Heard), is a strike here too: this replica's next one after it
// backs off to the next step (2 s), as the replica that met it would, for
// the old API's code and the new API's alike.
func TestGlobalLimitBackoffHeardFromAnotherReplica(t *testing.T) {
	for _, tc := range []struct {
		url, body string
		status    int
	}{
		{oldURL, `{"errcode":90002,"errmsg":"busy"}`, 200},
		{newURL, `{"code":"Forbidden.AccessDenied.QpsLimitForApi","message":"m"}`, 403},
	} {
		at := now.Truncate(time.Second).Add(999 * time.Millisecond)
		cfg := Config{Apps: []App{{}}, Clock: func() time.Time { return at }}
		a, b := testProfile(t, cfg), testProfile(t, cfg)
		first := routedClassify(a, request("GET", tc.url), answer(tc.status, json, tc.body))
		if first.Kind != providers.Quota || !first.Until.Equal(at.Add(time.Second)) {
			t.Fatalf("%s: the first: %+v", tc.body, first)
		}
		b.Heard(first.Scope, first.Code, first.Until) // announced to b
		at = first.Until.Add(500 * time.Millisecond)
		if got := routedClassify(b, request("GET", tc.url), answer(tc.status, json, tc.body)).Until.Sub(at); got != 2*time.Second {
			t.Errorf("%s: the next on the replica that heard of the first: %v, want 2s", tc.body, got)
		}
	}
}

// Config.Escalation and EscalationWindow replace the docs' backoff: a
// platform that changes its advice is followed without a release.
func TestGlobalLimitEscalationIsConfigured(t *testing.T) {
	at := now
	p := testProfile(t, Config{Apps: []App{{}}, Clock: func() time.Time { return at },
		Escalation: []time.Duration{3 * time.Second, 30 * time.Second}, EscalationWindow: time.Minute})
	old := `{"errcode":90002,"errmsg":"busy"}`
	for i, want := range []time.Duration{3 * time.Second, 30 * time.Second, 30 * time.Second} {
		v := routedClassify(p, request("GET", oldURL), answer(200, json, old))
		if got := v.Until.Sub(at); got != want {
			t.Fatalf("90002 number %d: penalty %v, want %v", i+1, got, want)
		}
		at = v.Until.Add(50 * time.Second) // within the minute's window
	}
}

func TestRetryAfterDateUsesClock(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	at := now.Truncate(time.Second).Add(30 * time.Second)
	want := at.Sub(now)
	cases := []struct {
		name, url string
		status    int
		ct, body  string
	}{
		{"429 without a code", oldURL, 429, json, `{}`},
		{"429 of no readable type", oldURL, 429, "image/png", "\x89PNG"},
		{"5xx", oldURL, 503, "text/plain", "busy"},
		{"HTML 403 from a proxy", newURL, 403, html, "<html>denied</html>"},
		{"HTML 429 from a gateway", newURL, 429, html, "<html>slow down</html>"},
		{"system busy", newURL, 503, json, `{"code":"system.busy","message":"busy"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := answer(tc.status, tc.ct, tc.body)
			resp.Header.Set("Retry-After", at.UTC().Format(http.TimeFormat))
			v := routedClassify(p, request("GET", tc.url), resp)
			if v.Kind != providers.Transient || v.RetryAfter != want {
				t.Errorf("verdict %v, RetryAfter %v; want transient with %v", v.Kind, v.RetryAfter, want)
			}
		})
	}
}

// A 2xx answer that is not JSON, HTML or text is OK without reading a
// byte of it.
func TestClassifyCheapOnBinary(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	req := request("GET", "https://oapi.dingtalk.com/media/downloadFile")
	body := &countingBody{r: bytes.NewReader(make([]byte, 1<<20))}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: body}
	if v := routedClassify(p, req, resp); v.Kind != providers.OK || body.n != 0 || resp.Body != io.ReadCloser(body) {
		t.Fatalf("verdict %v after reading %d bytes", v, body.n)
	}
	route, _ := p.Route(req)
	allocs := testing.AllocsPerRun(100, func() { p.Classify(req, resp, &route) })
	if allocs != 0 {
		t.Fatalf("classifying a binary answer allocated %v times", allocs)
	}
}

type countingBody struct {
	r *bytes.Reader
	n int
}

func (b *countingBody) Read(p []byte) (int, error) { n, err := b.r.Read(p); b.n += n; return n, err }
func (b *countingBody) Close() error               { return nil }

func FuzzClassify(f *testing.F) {
	seeds := []struct {
		status int
		ct     string
		body   string
	}{
		{200, json, `{"errcode":90018,"errmsg":"处罚将在 2025-03-10 14:30:17 结束."}`},
		{200, json, `{"errcode":88,"sub_code":"90018","sub_msg":"x","errmsg":"y"}`},
		{403, json, `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi","message":"m"}`},
		{200, html, `<html>punish x5sec</html>`},
		{200, "", `{"status":1111,"wait":5,"source":"x5","punish":"deny"}`},
		{429, json, `{"code":"system.busy"}`},
		{200, json, `{"errcode":0,"errmsg":"ok","id":90018}`},
	}
	for _, s := range seeds {
		f.Add(s.status, s.ct, []byte(s.body), "/user/get")
	}
	p := testProfile(f, Config{Apps: []App{{}}})
	f.Fuzz(func(t *testing.T, status int, ct string, body []byte, path string) {
		req := request("GET", "https://oapi.dingtalk.com/")
		req.URL.Path = path
		resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: -1}
		v := routedClassify(p, req, resp)
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("caller's body changed: %q, %v", got, err)
		}
		if v.Kind == providers.Quota && (v.Scope == "" || len(v.Scope) > 256) {
			t.Fatalf("quota verdict with scope %q", v.Scope)
		}
		if _, err := p.Route(req); err != nil {
			t.Fatalf("Route(%q): %v", path, err)
		}
	})
}

// A caller (or SDK) that asks for gzip itself gets the body as sent,
// compressed: its quota answer is recognised all the same.
func TestClassifyGzipAnswer(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	req := request(http.MethodGet, topURL)
	req.Header.Set("Accept-Encoding", "gzip")
	rt, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"errcode":90018,"errmsg":"too many"}`))
	zw.Close()
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {json}, "Content-Encoding": {"gzip"}},
		Body: io.NopCloser(bytes.NewReader(buf.Bytes())), ContentLength: int64(buf.Len())}
	if v := p.Classify(req, resp, &rt); v.Kind != providers.Quota {
		t.Fatalf("gzip-encoded 90018: verdict %v, want quota", v.Kind)
	}
}

// The backoff of a repeated global-limit error survives a rebuild of the
// preset for a new latency allowance, which copies the Config.
func TestGlobalLimitBackoffSurvivesARebuild(t *testing.T) {
	at := now
	p := MustNew(Config{Apps: []App{{AppKey: "dingapp"}}, Clock: func() time.Time { return at }}).Profile()
	if p.Headroom == nil {
		t.Fatal("no Headroom: the preset is not rebuilt")
	}
	old := `{"errcode":90002,"errmsg":"busy"}`
	first := routedClassify(p, request("GET", oldURL), answer(200, json, old)).Until
	rebuilt, err := p.Headroom.Rebuild(80 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	at = first.Add(500 * time.Millisecond)
	if got := routedClassify(rebuilt, request("GET", oldURL), answer(200, json, old)).Until.Sub(at); got != 2*time.Second {
		t.Fatalf("90002 again after a rebuild: %v, want the second step, 2s", got)
	}
}

// Unset, the allowance is measured; chosen, it is the profile's fixed
// Jitter, which bounds a late wake; NoJitter is neither.
func TestProfileCarriesTheJitterChosen(t *testing.T) {
	for _, c := range []Config{{}, {Jitter: 30 * time.Millisecond}, {NoJitter: true}} {
		c.Apps = []App{{AppKey: "dingapp"}}
		p := MustNew(c).Profile()
		if measured := c.Jitter == 0 && !c.NoJitter; (p.Headroom != nil) != measured || p.Jitter != c.Jitter {
			t.Errorf("Jitter %v NoJitter %v: Headroom %v, Profile.Jitter %v; want measured %v and %v fixed", c.Jitter, c.NoJitter, p.Headroom != nil, p.Jitter, measured, c.Jitter)
		}
	}
}
