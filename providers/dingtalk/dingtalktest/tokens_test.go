package dingtalktest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A second exchange within the token's lifetime returns the same token,
// on either API generation.
func TestSecondExchange(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	fetch := func(newAPI bool) string {
		var resp *http.Response
		var err error
		if newAPI {
			resp, err = http.Post(s.URL+"/v1.0/oauth2/accessToken", "application/json", strings.NewReader(`{"appKey":"dingA","appSecret":"s"}`))
		} else {
			resp, err = http.Get(s.URL + "/gettoken?appkey=dingA&appsecret=s")
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Old string `json:"access_token"`
			New string `json:"accessToken"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Old + a.New
	}
	for _, newAPI := range []bool{false, true} {
		if a, b := fetch(newAPI), fetch(newAPI); a == "" || a != b {
			t.Fatalf("second exchange (new API %v): %q after %q, want the same token", newAPI, b, a)
		}
	}
}
