package dingtalktest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	"github.com/quotaware/throttle/providers/internal/emulator"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

func newClock() *emulator.ManualClock {
	return emulator.NewManualClock(time.Date(2025, 3, 10, 14, 30, 15, 100e6, penaltytime.Beijing()))
}

func get(t *testing.T, s *dingtalktest.Server, path string) (*http.Response, string) {
	t.Helper()
	return do(t, s, "GET", path, "", nil)
}

func do(t *testing.T, s *dingtalktest.Server, method, path, body string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func newToken(tok string) http.Header { return http.Header{"X-Acs-Dingtalk-Access-Token": {tok}} }

func TestQPSFixedSecond(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, Tokens: map[string]string{"t1": "app1", "t2": "app2"}})
	defer s.Close()
	for i := 1; i <= 20; i++ {
		if _, body := get(t, s, "/user/get?access_token=t1"); !strings.Contains(body, `"errcode":0`) {
			t.Fatalf("call %d refused: %s", i, body)
		}
	}
	_, body := get(t, s, "/user/get?access_token=t1")
	var e struct {
		Errcode int    `json:"errcode"`
		Errmsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Errcode != 90018 {
		t.Fatalf("21st call: %s", body)
	}
	end, ok := penaltytime.ParseBeijingEnd(e.Errmsg, c.Now())
	if want := c.Now().Truncate(time.Second).Add(time.Second); !ok || !end.Equal(want) {
		t.Fatalf("penalty end %v, want %v (from %q)", end, want, e.Errmsg)
	}
	// Another API, another app: separate budgets.
	if _, body := get(t, s, "/department/list?access_token=t1"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("other API refused: %s", body)
	}
	if _, body := get(t, s, "/user/get?access_token=t2"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("other app refused: %s", body)
	}
	// /topapi wraps the code; the new API answers 403.
	for range 20 {
		get(t, s, "/topapi/v2/user/get?access_token=t2")
		do(t, s, "GET", "/v1.0/contact/users/manager4220", "", newToken("t2"))
	}
	if _, body := get(t, s, "/topapi/v2/user/get?access_token=t2"); !strings.Contains(body, `"errcode":88,"sub_code":"90018"`) {
		t.Fatalf("topapi 21st call: %s", body)
	}
	// IDs fold: another user is the same API.
	resp, body := do(t, s, "GET", "/v1.0/contact/users/manager4221", "", newToken("t2"))
	if resp.StatusCode != 403 || !strings.Contains(body, `"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"`) {
		t.Fatalf("new API 21st call: %d %s", resp.StatusCode, body)
	}
	// The next wall-clock second starts afresh, even 1 ms later.
	c.Set(c.Now().Truncate(time.Second).Add(time.Second))
	if _, body := get(t, s, "/user/get?access_token=t1"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("next second refused: %s", body)
	}
	if st := s.Stats(); st.Rejected != 3 {
		t.Fatalf("stats %+v, want 3 rejected", st)
	}
}

// AllQPS limits all callers of one API together, every app, per fixed
// second: the call past it gets 90002 (the new API: 403 QpsLimitForApi),
// whichever app makes it; another API, and the next second, go on.
func TestAllCallersOfOneAPI(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, AllQPS: 3, Tokens: map[string]string{"t1": "app1", "t2": "app2"}})
	defer s.Close()
	for i, tok := range []string{"t1", "t2", "t1"} {
		if _, body := get(t, s, "/user/get?access_token="+tok); !strings.Contains(body, `"errcode":0`) {
			t.Fatalf("call %d refused: %s", i+1, body)
		}
	}
	if _, body := get(t, s, "/user/get?access_token=t2"); !strings.Contains(body, `"errcode":90002`) {
		t.Fatalf("the 4th call of all apps to one API in a second: %s, want 90002", body)
	}
	if _, body := get(t, s, "/department/list?access_token=t2"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("another API refused: %s", body)
	}
	for range 3 {
		do(t, s, "GET", "/v1.0/contact/users/manager4220", "", newToken("t1"))
	}
	resp, body := do(t, s, "GET", "/v1.0/contact/users/manager4221", "", newToken("t2"))
	if resp.StatusCode != 403 || !strings.Contains(body, `"code":"Forbidden.AccessDenied.QpsLimitForApi"`) {
		t.Fatalf("the new API's 4th call: %d %s, want 403 QpsLimitForApi", resp.StatusCode, body)
	}
	c.Set(c.Now().Truncate(time.Second).Add(time.Second))
	if _, body := get(t, s, "/user/get?access_token=t2"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("next second refused: %s", body)
	}
	if st := s.Stats(); st.AllRejected != 2 || st.Rejected != 2 {
		t.Fatalf("stats %+v, want 2 rejected, both by AllQPS", st)
	}
}

// An API is a URL path: a path's methods share its per-second count.
func TestQPSPerPathWhateverTheMethod(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, QPS: 2, Tokens: map[string]string{"t1": "app1"}})
	defer s.Close()
	for _, method := range []string{"POST", "PUT"} {
		if resp, body := do(t, s, method, "/v1.0/attendance/groups", "{}", newToken("t1")); resp.StatusCode != 200 {
			t.Fatalf("%s within the limit: %d %s", method, resp.StatusCode, body)
		}
	}
	resp, body := do(t, s, "POST", "/v1.0/attendance/groups", "{}", newToken("t1"))
	if resp.StatusCode != 403 || !strings.Contains(body, "QpsLimitForAppkeyAndApi") {
		t.Fatalf("third call of the path in one second, by two methods: %d %s, want the per-API limit", resp.StatusCode, body)
	}
	// Two templates naming the path's parameter differently are one path.
	for _, method := range []string{"DELETE", "PUT"} {
		if resp, body := do(t, s, method, "/v1.0/doc/suites/documents/d1/blocks/b1", "{}", newToken("t1")); resp.StatusCode != 200 {
			t.Fatalf("%s of a block within the limit: %d %s", method, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, s, "PUT", "/v1.0/doc/suites/documents/d1/blocks/b1", "{}", newToken("t1")); resp.StatusCode != 403 {
		t.Fatalf("third call of the block path: %d %s, want the per-API limit", resp.StatusCode, body)
	}
}

func TestEgressBan(t *testing.T) {
	for _, htmlBan := range []bool{false, true} {
		c := newClock()
		s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, DefaultApp: "app", QPS: 1000,
			EgressLimit: 50, EgressWindow: 20 * time.Second, TimeScale: 60, BanHTML: htmlBan})
		for i := 0; i < 50; i++ {
			if _, body := get(t, s, "/user/get"); !strings.Contains(body, `"errcode":0`) {
				t.Fatalf("call %d refused: %s", i+1, body)
			}
		}
		p := dingtalk.MustNew(dingtalk.Config{Hosts: []string{s.Host()}, Clock: c.Now, Apps: []dingtalk.App{{AppKey: "app"}}}).Profile()
		check := func(path string, wantBan bool) {
			t.Helper()
			req, _ := http.NewRequest("GET", s.URL+path, nil)
			resp, err := s.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			v := routedClassify(p, req, resp)
			if got := v.Kind == providers.Quota && v.Scope == "egress:default"; got != wantBan {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("html %v, %s: verdict %+v, want ban %v (%s)", htmlBan, path, v, wantBan, b)
			}
		}
		check("/user/get", true) // the 51st in the window
		check("/gettoken", true) // every API, token calls too
		c.Add(4 * time.Second)   // 5 min / TimeScale 60 = 5 s of ban
		check("/department/list", true)
		c.Add(2 * time.Second) // the ban is over, and a new window has begun
		check("/department/list", false)
		st := s.Stats()
		if st.Bans != 1 || st.BannedAnswers != 3 {
			t.Fatalf("stats %+v, want 1 ban and 3 banned answers", st)
		}
		s.Close()
	}
}

func TestTokens(t *testing.T) {
	s := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{"dingapp": "secret"}})
	defer s.Close()
	_, body := get(t, s, "/gettoken?appkey=dingapp&appsecret=secret")
	var old struct {
		Errcode     int    `json:"errcode"`
		AccessToken string `json:"access_token"`
	}
	if json.Unmarshal([]byte(body), &old); old.Errcode != 0 || old.AccessToken == "" {
		t.Fatalf("gettoken: %s", body)
	}
	resp, body := do(t, s, "POST", "/v1.0/oauth2/accessToken", `{"appKey":"dingapp","appSecret":"secret"}`, http.Header{"Content-Type": {"application/json"}})
	var nw struct {
		AccessToken string `json:"accessToken"`
		ExpireIn    int    `json:"expireIn"`
	}
	if json.Unmarshal([]byte(body), &nw); resp.StatusCode != 200 || nw.AccessToken == "" || nw.ExpireIn != 7200 {
		t.Fatalf("accessToken: %d %s", resp.StatusCode, body)
	}
	if _, body := get(t, s, "/gettoken?appkey=dingapp&appsecret=wrong"); !strings.Contains(body, `"errcode":40089`) {
		t.Fatalf("bad secret: %s", body)
	}
	if resp, _ := do(t, s, "POST", "/v1.0/oauth2/accessToken", `{"appKey":"x","appSecret":"y"}`, nil); resp.StatusCode != 400 {
		t.Fatalf("bad app: %d", resp.StatusCode)
	}
	// Tokens identify the app, in the query, a form body or the header.
	get(t, s, "/user/get?access_token="+old.AccessToken)
	do(t, s, "POST", "/topapi/v2/user/get", "access_token="+old.AccessToken, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
	do(t, s, "GET", "/v1.0/contact/users/u1", "", newToken(nw.AccessToken))
	if _, body := get(t, s, "/user/get?access_token=unknown"); !strings.Contains(body, `"errcode":40014`) {
		t.Fatalf("unknown token: %s", body)
	}
	if resp, _ := do(t, s, "GET", "/v1.0/contact/users/u1", "", newToken("unknown")); resp.StatusCode != 401 {
		t.Fatalf("unknown token, new API: %d", resp.StatusCode)
	}
	recs := s.Requests()
	if len(recs) != 9 {
		t.Fatalf("%d records", len(recs))
	}
	for i, want := range []string{"dingapp", "dingapp", "", "", "dingapp", "dingapp", "dingapp", "", ""} {
		if recs[i].App != want {
			t.Errorf("record %d %+v: app %q, want %q", i, recs[i], recs[i].App, want)
		}
	}
}

// Older SDKs still fetch the token with the legacy corpid and corpsecret.
func TestLegacyGettoken(t *testing.T) {
	s := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{"dingcorp": "secret"}})
	defer s.Close()
	var tok struct {
		Errcode     int    `json:"errcode"`
		AccessToken string `json:"access_token"`
	}
	if _, body := get(t, s, "/gettoken?corpid=dingcorp&corpsecret=secret"); json.Unmarshal([]byte(body), &tok) != nil || tok.Errcode != 0 || tok.AccessToken == "" {
		t.Fatalf("legacy gettoken: %s", body)
	}
	if _, body := get(t, s, "/gettoken?corpid=dingcorp&corpsecret=wrong"); !strings.Contains(body, `"errcode":40089`) {
		t.Fatalf("legacy gettoken, bad secret: %s", body)
	}
	if _, body := get(t, s, "/user/get?access_token="+tok.AccessToken); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("call with the legacy token: %s", body)
	}
	if got := s.Requests()[2].App; got != "dingcorp" {
		t.Fatalf("app %q, want dingcorp", got)
	}
}

func TestMonthlyQuota(t *testing.T) {
	c := newClock()
	c.Set(time.Date(2025, 3, 31, 23, 59, 58, 0, penaltytime.Beijing()))
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, DefaultApp: "app", MonthlyQuota: 3})
	defer s.Close()
	for range 3 {
		get(t, s, "/topapi/v2/user/get")
	}
	if _, body := get(t, s, "/topapi/v2/user/get"); !strings.Contains(body, `"sub_code":"90020"`) {
		t.Fatalf("4th metered call: %s", body)
	}
	if _, body := get(t, s, "/user/get"); !strings.Contains(body, `"errcode":90020`) {
		t.Fatalf("other metered API: %s", body)
	}
	if resp, body := do(t, s, "GET", "/v1.0/contact/users/manager4220", "", nil); resp.StatusCode != 403 || !strings.Contains(body, "ApiCountLimitForOrg") {
		t.Fatalf("new metered API: %d %s", resp.StatusCode, body)
	}
	if _, body := get(t, s, "/topapi/message/corpconversation/asyncsend_v2"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("unmetered API refused: %s", body)
	}
	c.Add(2 * time.Second) // April, Beijing time
	if _, body := get(t, s, "/user/get"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("new month refused: %s", body)
	}
}

// The newer token form, POST /v1.0/oauth2/{corpId}/token, names the app's
// organisation, whose monthly quota its calls count in: two apps of one
// company share it.
func TestNewerTokenFormSharesTheOrgsMonth(t *testing.T) {
	s := dingtalktest.New(dingtalktest.Options{Apps: map[string]string{"dingA": "sa", "dingB": "sb"}, MonthlyQuota: 3})
	defer s.Close()
	token := func(app, secret string) string {
		t.Helper()
		resp, body := do(t, s, "POST", "/v1.0/oauth2/dingcorp/token",
			`{"client_id":"`+app+`","client_secret":"`+secret+`","grant_type":"client_credentials"}`, http.Header{"Content-Type": {"application/json"}})
		var a struct {
			AccessToken string `json:"access_token"`
			ExpiresIn   int    `json:"expires_in"`
		}
		if json.Unmarshal([]byte(body), &a); resp.StatusCode != 200 || a.AccessToken == "" || a.ExpiresIn != 7200 {
			t.Fatalf("%s: newer token form: %d %s", app, resp.StatusCode, body)
		}
		return a.AccessToken
	}
	a, b := token("dingA", "sa"), token("dingB", "sb")
	if resp, _ := do(t, s, "POST", "/v1.0/oauth2/dingcorp/token", `{"client_id":"dingA","client_secret":"wrong"}`, nil); resp.StatusCode != 400 {
		t.Fatalf("newer token form, bad secret: %d", resp.StatusCode)
	}
	for _, tok := range []string{a, a, b} {
		if resp, body := do(t, s, "GET", "/v1.0/contact/users/manager4220", "", newToken(tok)); resp.StatusCode != 200 {
			t.Fatalf("metered call within the org's month: %d %s", resp.StatusCode, body)
		}
	}
	if resp, body := do(t, s, "GET", "/v1.0/contact/users/manager4220", "", newToken(b)); resp.StatusCode != 403 || !strings.Contains(body, "ApiCountLimitForOrg") {
		t.Fatalf("4th metered call of the org, by its second app: %d %s", resp.StatusCode, body)
	}
	if n := s.Fetches("dingA", ""); n != 1 {
		t.Fatalf("Fetches(dingA) = %d, want 1", n)
	}
}

func TestFaults(t *testing.T) {
	s := dingtalktest.New(dingtalktest.Options{DefaultApp: "app"})
	defer s.Close()
	s.ForceBusy(2)
	s.Force503(1)
	s.FailNext(1, 200, `{"errcode":90002,"errmsg":"x"}`)
	if _, body := get(t, s, "/user/get"); body != `{"errcode":-1,"errmsg":"系统繁忙"}` {
		t.Fatalf("busy old: %s", body)
	}
	if resp, body := do(t, s, "GET", "/v1.0/contact/users/x", "", nil); resp.StatusCode != 429 || !strings.Contains(body, "system.busy") {
		t.Fatalf("busy new: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, s, "/user/get"); resp.StatusCode != 503 {
		t.Fatalf("503: %d", resp.StatusCode)
	}
	if _, body := get(t, s, "/user/get"); !strings.Contains(body, "90002") {
		t.Fatalf("custom: %s", body)
	}
	if _, body := get(t, s, "/user/get"); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("after faults: %s", body)
	}
	codes := []string{}
	for _, r := range s.Requests() {
		codes = append(codes, r.Code)
	}
	if got := strings.Join(codes, ","); got != "-1,system.busy,ServiceUnavailable,90002," {
		t.Fatalf("recorded codes %q", got)
	}
	if st := s.Stats(); st.Injected != 4 || st.Requests != 5 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGenericSuccess(t *testing.T) {
	s := dingtalktest.New(dingtalktest.Options{DefaultApp: "app"})
	defer s.Close()
	for path, want := range map[string]string{
		"/department/list":              `"department":[`,
		"/topapi/v2/user/get?userid=u9": `"result":{"userid":"u9"`,
		"/v1.0/contact/users/u7":        `"unionId":"u7"`,
		"/topapi/anything":              `"errcode":0`,
		"/v1.0/anything/else":           `"success":true`,
	} {
		if _, body := get(t, s, path); !strings.Contains(body, want) {
			t.Errorf("%s: %s", path, body)
		}
	}
	if _, body := do(t, s, "POST", "/v1.0/robot/oToMessages/batchSend", `{}`, nil); !strings.Contains(body, `"processQueryKey"`) {
		t.Errorf("batchSend: %s", body)
	}
}

// Concurrent callers: exactly QPS per second get through, and every
// request is recorded once.
func TestConcurrent(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, DefaultApp: "app", LatencyMin: time.Millisecond, LatencyMax: 3 * time.Millisecond})
	defer s.Close()
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", s.URL+"/user/get", nil)
			resp, err := s.Client().Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	ok := 0
	for _, r := range s.Requests() {
		if r.Code == "" {
			ok++
		}
	}
	if st := s.Stats(); ok != 20 || st.Rejected != 40 || st.Requests != 60 {
		t.Fatalf("%d admitted, stats %+v", ok, st)
	}
}

// The preset reads every error the emulator answers as the platform's.
func TestPresetReadsEmulator(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, DefaultApp: "app", QPS: 1, MonthlyQuota: 2})
	defer s.Close()
	p := dingtalk.MustNew(dingtalk.Config{Hosts: []string{s.Host()}, Clock: c.Now, Apps: []dingtalk.App{{AppKey: "app"}}}).Profile()
	nextSec := c.Now().Truncate(time.Second).Add(time.Second)
	tests := []struct {
		method, path, scope, code string
		until                     time.Time
	}{
		{"GET", "/topapi/v2/user/get", "", "", time.Time{}},
		{"GET", "/topapi/v2/user/get", "api:app:/topapi/v2/user/get", "90018", nextSec},
		{"GET", "/department/list", "", "", time.Time{}},
		{"GET", "/department/list", "api:app:/department/list", "90018", nextSec},
		{"GET", "/v1.0/contact/users/manager4220", "monthly:app", "Forbidden.AccessDenied.ApiCountLimitForOrg",
			penaltytime.NextMonth(c.Now()).Add(5 * time.Second)},
		{"POST", "/v1.0/robot/oToMessages/batchSend", "", "", time.Time{}},
		{"POST", "/v1.0/robot/oToMessages/batchSend", "api:app:/v1.0/robot/oToMessages/batchSend", "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi", nextSec},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, s.URL+tt.path, nil)
		if !p.Match(req) {
			t.Fatalf("profile does not match %s", req.URL)
		}
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		v := routedClassify(p, req, resp)
		resp.Body.Close()
		if v.Scope != tt.scope || v.Code != tt.code || !v.Until.Equal(tt.until) {
			t.Errorf("%s: verdict %+v, want scope %q code %q until %v", tt.path, v, tt.scope, tt.code, tt.until)
		}
	}
}
