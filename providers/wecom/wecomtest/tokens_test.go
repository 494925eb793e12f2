package wecomtest

import (
	"encoding/json"
	"net/http"
	"testing"
)

// A second gettoken within the token's lifetime returns the same token.
func TestSecondExchange(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	fetch := func() string {
		resp, err := http.Get(s.URL + "/cgi-bin/gettoken?corpid=ww1&corpsecret=s")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Token string `json:"access_token"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Token
	}
	if a, b := fetch(), fetch(); a == "" || a != b {
		t.Fatalf("second gettoken: %q after %q, want the same token", b, a)
	}
}

// A revoked token answers 40014 at once; the next gettoken issues another.
func TestRevoke(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	get := func(path string) (tok string, code int) {
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Token   string `json:"access_token"`
			ErrCode int    `json:"errcode"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Token, a.ErrCode
	}
	tok, _ := get("/cgi-bin/gettoken?corpid=ww1&corpsecret=s")
	s.Revoke(tok)
	if _, code := get("/cgi-bin/user/get?userid=u1&access_token=" + tok); code != CodeBadToken {
		t.Fatalf("revoked token: errcode %d, want %d", code, CodeBadToken)
	}
	if next, _ := get("/cgi-bin/gettoken?corpid=ww1&corpsecret=s"); next == tok || next == "" {
		t.Fatalf("gettoken after a revocation: %q", next)
	}
}
