package feishutest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A second exchange returns the same tenant token while at least 30
// minutes of it remain, and a new one below that.
func TestSecondExchange(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	s := NewServer(Options{Clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	defer s.Close()
	fetch := func() (string, int) {
		resp, err := http.Post(s.URL+"/open-apis/auth/v3/tenant_access_token/internal", "application/json",
			strings.NewReader(`{"app_id":"cli_a","app_secret":"s"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Token  string `json:"tenant_access_token"`
			Expire int    `json:"expire"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Token, a.Expire
	}
	first, _ := fetch()
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if tok, left := fetch(); tok != first || left != 3600 {
		t.Fatalf("an hour on: %q with %d s left, want %q with 3600", tok, left, first)
	}
	mu.Lock()
	now = now.Add(31 * time.Minute)
	mu.Unlock()
	if tok, left := fetch(); tok == first || left != 7200 {
		t.Fatalf("29 minutes left: %q with %d s, want a new token", tok, left)
	}
}

// A revoked token answers 99991663 at once; the next exchange issues
// another.
func TestRevoke(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	fetch := func() string {
		resp, err := http.Post(s.URL+"/open-apis/auth/v3/tenant_access_token/internal", "application/json",
			strings.NewReader(`{"app_id":"cli_a","app_secret":"s"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Token string `json:"tenant_access_token"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Token
	}
	tok := fetch()
	s.Revoke(tok)
	req, _ := http.NewRequest("GET", s.URL+"/open-apis/contact/v3/users/ou_1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Code int `json:"code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if a.Code != CodeTokenInvalid {
		t.Fatalf("revoked token: code %d, want %d", a.Code, CodeTokenInvalid)
	}
	if next := fetch(); next == tok || next == "" {
		t.Fatalf("exchange after a revocation: %q", next)
	}
	if n := s.Fetches("cli_a"); n != 2 {
		t.Fatalf("Fetches = %d, want 2", n)
	}
}
