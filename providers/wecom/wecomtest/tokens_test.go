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
