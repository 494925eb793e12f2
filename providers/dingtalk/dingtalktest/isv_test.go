package dingtalktest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// corpToken fetches a suite's token for one customer org, new API.
func corpToken(t *testing.T, s *dingtalktest.Server, suite, org string) string {
	t.Helper()
	_, body := do(t, s, "POST", "/v1.0/oauth2/corpAccessToken",
		`{"suiteKey":"`+suite+`","suiteSecret":"sec","authCorpId":"`+org+`","suiteTicket":"tk"}`, nil)
	var a struct {
		AccessToken string `json:"accessToken"`
	}
	if json.Unmarshal([]byte(body), &a) != nil || a.AccessToken == "" {
		t.Fatalf("corpAccessToken answered %s", body)
	}
	return a.AccessToken
}

func TestISVTokensAreLimitedPerOrgAndAPI(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, ISVQPS: 3, Suites: map[string]string{"suite1": "sec"}})
	defer s.Close()
	org1, org2 := corpToken(t, s, "suite1", "corp1"), corpToken(t, s, "suite1", "corp2")
	if org1 == org2 {
		t.Fatal("two orgs got the same token")
	}
	for i := 1; i <= 3; i++ {
		for _, tok := range []string{org1, org2} {
			if resp, body := do(t, s, "GET", "/v1.0/contact/users/u1", "", newToken(tok)); resp.StatusCode != 200 {
				t.Fatalf("call %d refused: %s", i, body)
			}
		}
	}
	resp, body := do(t, s, "GET", "/v1.0/contact/users/u1", "", newToken(org1))
	if resp.StatusCode != 403 || !strings.Contains(body, "QpsLimitForSuitekeyAndOrgAndApi") {
		t.Fatalf("4th call of org1 in one second: %d %s, want 403 QpsLimitForSuitekeyAndOrgAndApi", resp.StatusCode, body)
	}
	// Another API of the same org has its own count.
	if _, body := get(t, s, "/topapi/v2/user/get?access_token="+org1); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("another API of org1 refused: %s", body)
	}
	recs := s.Requests()
	if last := recs[len(recs)-1]; last.App != "suite1" || last.Org != "corp1" {
		t.Fatalf("recorded app %q org %q, want suite1 corp1", last.App, last.Org)
	}
	// The old API's ISV answer is 90019.
	for range 3 {
		get(t, s, "/topapi/v2/user/get?access_token="+org1)
	}
	if _, body := get(t, s, "/topapi/v2/user/get?access_token="+org1); !strings.Contains(body, `"sub_code":"90019"`) {
		t.Fatalf("old API over the limit: %s, want sub_code 90019", body)
	}
}

func TestISVTokenNeedsSuiteSecretAndOrg(t *testing.T) {
	s := dingtalktest.New(dingtalktest.Options{Suites: map[string]string{"suite1": "sec"}})
	defer s.Close()
	for _, body := range []string{
		`{"suiteKey":"suite1","suiteSecret":"wrong","authCorpId":"corp1"}`,
		`{"suiteKey":"suite1","suiteSecret":"sec"}`,
	} {
		if resp, got := do(t, s, "POST", "/v1.0/oauth2/corpAccessToken", body, nil); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s, want 400", body, resp.StatusCode, got)
		}
	}
}

func TestAppQPSPerApp(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, QPS: 2, AppQPS: map[string]int{"pro": 4},
		Tokens: map[string]string{"tstd": "std", "tpro": "pro"}})
	defer s.Close()
	ok := map[string]int{}
	for range 6 {
		for _, tok := range []string{"tstd", "tpro"} {
			if _, body := get(t, s, "/user/get?access_token="+tok); strings.Contains(body, `"errcode":0`) {
				ok[tok]++
			}
		}
	}
	if ok["tstd"] != 2 || ok["tpro"] != 4 {
		t.Fatalf("admitted in one second: %v, want tstd 2 and tpro 4", ok)
	}
}

// The monthly quota is the organisation's: a suite's customer orgs each
// have their own, and two suites in one org share it.
func TestISVMonthlyQuotaPerOrg(t *testing.T) {
	c := newClock()
	s := dingtalktest.New(dingtalktest.Options{Clock: c.Now, MonthlyQuota: 2, Suites: map[string]string{"suite1": "sec", "suite2": "sec"}})
	defer s.Close()
	org1, org2, other := corpToken(t, s, "suite1", "corp1"), corpToken(t, s, "suite1", "corp2"), corpToken(t, s, "suite2", "corp1")
	for _, tok := range []string{org1, other} { // corp1's two calls, by two suites
		if _, body := get(t, s, "/user/get?access_token="+tok); !strings.Contains(body, `"errcode":0`) {
			t.Fatalf("metered call refused: %s", body)
		}
	}
	if _, body := get(t, s, "/user/get?access_token="+org1); !strings.Contains(body, `"errcode":90020`) {
		t.Fatalf("corp1's third metered call: %s, want 90020", body)
	}
	if _, body := get(t, s, "/user/get?access_token="+org2); !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("corp2's first metered call: %s, want it admitted", body)
	}
}
