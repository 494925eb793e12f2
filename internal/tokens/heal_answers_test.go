package tokens

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
)

// One token can come from two exchanges, each keeping its own answer:
// Feishu's tenant_access_token/internal and app_access_token/internal
// answer the same tenant token. When Feishu refuses that token, both kept
// answers go, and both exchanges fetch anew (only the answer remembered
// last used to go; the other kept handing out the refused token).
func TestRefusedTokenHealsEveryAnswerKeepingIt(t *testing.T) {
	var mu sync.Mutex
	gen := 1
	fetches := map[string]int{}
	tenant := func() string { return fmt.Sprintf("t-%032d", gen) }
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		switch r.URL.Path {
		case "/open-apis/auth/v3/tenant_access_token/internal":
			fetches[r.URL.Path]++
			fmt.Fprintf(w, `{"code":0,"msg":"ok","tenant_access_token":%q,"expire":7200}`, tenant())
		case "/open-apis/auth/v3/app_access_token/internal":
			fetches[r.URL.Path]++
			fmt.Fprintf(w, `{"code":0,"msg":"ok","app_access_token":"a-%032d","tenant_access_token":%q,"expire":7200}`, gen, tenant())
		default:
			if r.Header.Get("Authorization") != "Bearer "+tenant() {
				fmt.Fprint(w, `{"code":99991663,"msg":"Invalid access token for authorization"}`)
				return
			}
			fmt.Fprint(w, `{"code":0,"msg":"ok"}`)
		}
	}))
	t.Cleanup(provider.Close)
	s, err := New(redistest.Shared(t).Client(t), WithPrefix("heal-"+t.Name()+"-"+nonce())) // a run of its own, with -count too
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	post := func(path, body, auth string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, provider.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	creds := `{"app_id":"cli_a","app_secret":"S3CRET"}`
	exchangeBoth := func() {
		t.Helper()
		for _, p := range []string{"/open-apis/auth/v3/tenant_access_token/internal", "/open-apis/auth/v3/app_access_token/internal"} {
			if got := post(p, creds, ""); !strings.Contains(got, tenant()) {
				t.Fatalf("%s answered %s, want the token in force %s", p, got, tenant())
			}
		}
	}
	exchangeBoth()
	old := tenant()
	mu.Lock()
	gen++ // Feishu invalidates the token
	mu.Unlock()
	if got := post("/open-apis/im/v1/chats", "{}", old); !strings.Contains(got, "99991663") {
		t.Fatalf("a call with the old token: %s", got)
	}
	exchangeBoth()
	mu.Lock()
	defer mu.Unlock()
	for p, n := range fetches {
		if n != 2 {
			t.Errorf("%s fetched %d times, want 2 (once, then once after the refusal)", p, n)
		}
	}
}
