package tokens

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
)

// Feishu's app_access_token/internal hands out two tokens, the tenant's and
// the app's, and each is watched: a 99991664 for the app token heals the
// answer that handed it out, the next exchange fetches anew, and the calls
// still carrying the refused app token go with the new app token (never
// with the tenant's). Before, only the tenant token was remembered, and
// the refused app token was handed out until its kept answer ended.
func TestFeishuAppTokenRefusalHeals(t *testing.T) {
	var mu sync.Mutex
	issued := 0
	dead := map[string]bool{}
	var seen []string // the tokens the calls came with
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if r.URL.Path == "/open-apis/auth/v3/app_access_token/internal" {
			issued++
			fmt.Fprintf(w, `{"app_access_token":"a-APPTOKEN%04d","code":0,"expire":7200,"msg":"ok","tenant_access_token":"t-TENANT%04d"}`, issued, issued)
			return
		}
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		seen = append(seen, tok)
		if dead[tok] {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"code":99991664,"msg":"invalid app access token"}`)
			return
		}
		fmt.Fprint(w, `{"code":0,"msg":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	s, err := New(redistest.Start(t).Client(t), WithPrefix("feishuapp"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	post := jsonPoster(t, c, srv.URL)
	app := func() string {
		t.Helper()
		v, _ := post("/open-apis/auth/v3/app_access_token/internal", `{"app_id":"cli_1","app_secret":"S3CRET-1"}`)["app_access_token"].(string)
		return v
	}
	call := func(tok string) float64 {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/open-apis/authen/v1/oidc/access_token", strings.NewReader(`{"grant_type":"authorization_code","code":"x"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct{ Code float64 }
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.Code
	}
	first := app()
	mu.Lock()
	dead[first] = true
	mu.Unlock()
	if code := call(first); code != 99991664 {
		t.Fatalf("the call with the refused app token: code %v, want 99991664 as Feishu answered it", code)
	}
	if st := s.Stats(); st.Healed != 1 {
		t.Fatalf("stats %+v, want the refused app token's answer healed", st)
	}
	again := app()
	if again == first || again == "" {
		t.Fatalf("after Feishu refused the app token, the exchange answered %q (stats %+v)", again, s.Stats())
	}
	if code := call(first); code != 0 {
		t.Fatalf("a call with the refused app token after the new one was kept: code %v, want 0", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if last := seen[len(seen)-1]; last != again {
		t.Fatalf("the call went with %q, want the new app token %q", last, again)
	}
}
