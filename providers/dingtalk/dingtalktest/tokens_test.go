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

// A revoked token is refused on both generations, and the next exchange
// issues a new one; Fetches counts the exchanges answered with a token.
func TestRevoke(t *testing.T) {
	s := New(Options{Apps: map[string]string{"dingA": "s"}})
	defer s.Close()
	get := func(path string) (string, int) {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Tok  string `json:"access_token"`
			Code int    `json:"errcode"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Tok, a.Code
	}
	first, _ := get("/gettoken?appkey=dingA&appsecret=s")
	if _, code := get("/user/get?access_token=" + first); code != 0 {
		t.Fatalf("call before the revocation: errcode %d", code)
	}
	s.Revoke(first)
	if _, code := get("/user/get?access_token=" + first); code != 40014 {
		t.Fatalf("call with the revoked token: errcode %d, want 40014", code)
	}
	second, _ := get("/gettoken?appkey=dingA&appsecret=s")
	if second == "" || second == first {
		t.Fatalf("exchange after the revocation: %q, want a new token", second)
	}
	if n := s.Fetches("dingA", ""); n != 2 {
		t.Fatalf("Fetches = %d, want 2", n)
	}
	invalid := 0
	for _, r := range s.Requests() {
		if r.Code == "40014" || r.Code == "InvalidAuthentication" {
			invalid++
		}
	}
	if invalid != 1 {
		t.Fatalf("%d invalid-token records, want 1", invalid)
	}
}
