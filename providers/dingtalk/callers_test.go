package dingtalk_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// DingTalk's limit on all callers of one API (90002; the new API's
// QpsLimitForApi) refuses every app alike: one app's refusal stops the
// API for every app and org of the deployment, and no other API. Before,
// it stopped the app that got it, and each other app called on into the
// same refusal.
func TestAllCallersLimitStopsEveryApp(t *testing.T) {
	emu := dingtalktest.New(dingtalktest.Options{Tokens: map[string]string{"t1": "dingOne", "t2": "dingTwo"}})
	t.Cleanup(emu.Close)
	preset := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()},
		// A penalty far longer than the test, so that none ends inside it.
		Escalation: []time.Duration{time.Hour},
		Apps:       []dingtalk.App{{AppKey: "dingOne"}, {AppKey: "dingTwo"}}})
	tr := throttle.MustNew(throttle.WithProfiles(preset.Profile()), throttle.WithoutTelemetry(), throttle.WithoutRetry(),
		throttle.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	call := func(app, tok, path string) (string, error) {
		ctx := throttle.ContextWithApp(context.Background(), app)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, emu.URL+path+"?access_token="+tok, nil)
		req.Header.Set("x-acs-dingtalk-access-token", tok) // the new API's place for it
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, tc := range []struct{ name, path, status, body, scope string }{
		{"old API", "/user/get", "", `{"errcode":90002,"errmsg":"您的服务器调用钉钉开放平台当前接口的所有请求都被暂时禁用了"}`, "callers:/user/get"},
		{"new API", "/v1.0/contact/users/manager4220", "403", `{"code":"Forbidden.AccessDenied.QpsLimitForApi","message":"m","requestid":"r"}`, "callers:/v1.0/contact/users/{unionId}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := http.StatusOK
			if tc.status != "" {
				status = http.StatusForbidden
			}
			emu.FailNext(1, status, tc.body)
			if body, err := call("dingOne", "t1", tc.path); err != nil || body != tc.body {
				t.Fatalf("dingOne's call: %q, %v; want the refusal as it came", body, err)
			}
			before := emu.Stats().Requests
			_, err := call("dingTwo", "t2", tc.path)
			var pe *throttle.PenaltyError
			if !errors.As(err, &pe) || pe.Scope != tc.scope {
				t.Fatalf("dingTwo's call of the refused API: %v, want a penalty on %s", err, tc.scope)
			}
			if n := emu.Stats().Requests - before; n != 0 {
				t.Fatalf("the emulator got %d calls of the refused API, want 0", n)
			}
			if _, err := call("dingTwo", "t2", "/department/list"); err != nil {
				t.Fatalf("dingTwo's call of another API: %v", err)
			}
		})
	}
	// Paths no catalog knows are one API here but not at DingTalk: a
	// refusal of one stops that app's unknown paths, not the others'.
	body := `{"errcode":90002,"errmsg":"busy"}`
	emu.FailNext(1, http.StatusOK, body)
	if got, err := call("dingOne", "t1", "/topapi/newly/published/a"); err != nil || got != body {
		t.Fatalf("dingOne's call of an unknown path: %q, %v; want the refusal", got, err)
	}
	if _, err := call("dingTwo", "t2", "/topapi/another/unknown/b"); err != nil {
		t.Fatalf("dingTwo's call of another unknown path after dingOne's refusal: %v, want it called", err)
	}
}
