package wechattest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// quotaGet asks the emulator for path's quota, as WeChat's API is asked.
func quotaGet(t *testing.T, s *Server, token, path string) (code, limit, used, remain int) {
	t.Helper()
	resp, err := s.Client().Post(s.URL+QuotaGetPath+"?"+url.Values{"access_token": {token}}.Encode(),
		"application/json", strings.NewReader(`{"cgi_path":"`+path+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a struct {
		Errcode int `json:"errcode"`
		Quota   struct {
			DailyLimit int `json:"daily_limit"`
			Used       int `json:"used"`
			Remain     int `json:"remain"`
		} `json:"quota"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return a.Errcode, a.Quota.DailyLimit, a.Quota.Used, a.Quota.Remain
}

// quota/get answers from the emulator's own counts: its daily limit, the
// calls of today (its own callers' and those Spend adds for another
// client), and what remains; a path without a daily quota is 76021.
func TestQuotaGetAnswersFromOwnCounts(t *testing.T) {
	const path = "/cgi-bin/message/custom/send"
	s := NewServer(Options{Limits: Limits{Daily: map[string]int{path: 10}}, Clock: emulator.NewManualClock(time.Now()).Now})
	defer s.Close()
	tok := s.Token("wxapp")
	if code, limit, used, remain := quotaGet(t, s, tok, path); code != 0 || limit != 10 || used != 0 || remain != 10 {
		t.Fatalf("fresh: code %d, %d/%d used, %d remain; want 0, 0/10, 10", code, used, limit, remain)
	}
	for range 3 {
		call(t, s, http.MethodPost, path, url.Values{"access_token": {tok}}, `{}`)
	}
	s.Spend("wxapp", path, 4)
	if code, limit, used, remain := quotaGet(t, s, tok, path); code != 0 || limit != 10 || used != 7 || remain != 3 {
		t.Fatalf("after 3 calls and 4 spent elsewhere: code %d, %d/%d used, %d remain; want 0, 7/10, 3", code, used, limit, remain)
	}
	for i := range 4 {
		a := call(t, s, http.MethodPost, path, url.Values{"access_token": {tok}}, `{}`)
		if want := map[bool]int{true: 0, false: CodeDailyQuota}[i < 3]; a.Errcode != want {
			t.Errorf("call %d of the rest: errcode %d, want %d", i, a.Errcode, want)
		}
	}
	if code, _, _, _ := quotaGet(t, s, tok, "/cgi-bin/unknown"); code != CodeQuotaBadPath {
		t.Errorf("a path without a quota: errcode %d, want %d", code, CodeQuotaBadPath)
	}
}
