package tokens

import (
	"bytes"
	"encoding/json"
	"testing"
)

// countDown changes nothing but the lifetime's digits: the rest of the
// answer is byte for byte the provider's, and what it returns is JSON
// whenever the answer was.
func FuzzCountDown(f *testing.F) {
	f.Add([]byte(`{"access_token":"ACCESS_TOKEN","expires_in":7200}`), int64(6200))
	f.Add([]byte(`{"errcode":0,"access_token":"x","expires_in":7200,"errmsg":"ok"}`), int64(1))
	f.Add([]byte(`{"accessToken":"a","expireIn":7200}`), int64(300))
	f.Add([]byte(`{"code":0,"msg":"ok","tenant_access_token":"t-1","expire":7200}`), int64(10))
	f.Add([]byte(`{"nested":{"expires_in":1},"expires_in":2.5e3}`), int64(3))
	f.Add([]byte(`{"expires_in":"7200"}`), int64(3))
	f.Fuzz(func(t *testing.T, answer []byte, left int64) {
		out, ok := countDown(answer, left)
		if !ok {
			return
		}
		if json.Valid(answer) && !json.Valid(out) {
			t.Fatalf("countDown(%q) = %q, not JSON", answer, out)
		}
		// The bytes around the number are the answer's own.
		i := 0
		for i < len(answer) && i < len(out) && answer[i] == out[i] {
			i++
		}
		j := 0
		for j < len(answer)-i && j < len(out)-i && answer[len(answer)-1-j] == out[len(out)-1-j] {
			j++
		}
		changed := out[i : len(out)-j]
		for _, c := range changed {
			if !bytes.ContainsRune([]byte("-0123456789"), rune(c)) {
				t.Fatalf("countDown(%q) = %q: changed more than the number", answer, out)
			}
		}
	})
}

func TestCountDown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"access_token":"A","expires_in":7200}`, `{"access_token":"A","expires_in":6200}`},
		{`{"nested":{"expires_in":1}, "expireIn" : 7200 ,"x":[1,{"expire":2}]}`, `{"nested":{"expires_in":1}, "expireIn" : 6200 ,"x":[1,{"expire":2}]}`},
	} {
		out, ok := countDown([]byte(tc.in), 6200)
		if !ok || string(out) != tc.want {
			t.Errorf("countDown(%s) = %s, %v; want %s", tc.in, out, ok, tc.want)
		}
	}
	// Two lifetimes, or one in another case: an SDK decoding with
	// encoding/json would read one that was not counted down.
	for _, in := range []string{`{"access_token":"A"}`, `[7200]`, `{"expires_in":"7200"}`, `not json`,
		`{"expire":7200,"expires_in":9}`, `{"expires_in":7200,"expires_in":9}`, `{"access_token":"A","Expires_In":7200}`} {
		if out, ok := countDown([]byte(in), 1); ok {
			t.Errorf("countDown(%s) = %s, want no lifetime", in, out)
		}
	}
}
