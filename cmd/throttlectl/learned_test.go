package main_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// Issue 26: status shows the limits learned from the provider: a WeChat
// daily quota a Transport reconciled with quota/get (the emulator grants
// 250 where the preset says 100) and a Feishu level lowered by a 99991400,
// each with its source and expiry; a lapsed one is not shown.
func TestStatusShowsLearnedLimits(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	const api, app = "/cgi-bin/message/custom/send", "wxreconciled"
	emu := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{Daily: map[string]int{api: 250}}})
	defer emu.Close()
	u, _ := url.Parse(emu.URL)
	shared, err := limiter.NewShared(srv.Client(t), limiter.SharedConfig{Prefix: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	preset := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Reconcile: true,
		Apps: []wechat.App{{AppID: app, Daily: map[string]int{api: 100}}}})
	tr := throttle.MustNew(throttle.WithLimiter(shared), throttle.WithProfiles(preset.Profile()),
		throttle.WithLogger(slog.New(slog.DiscardHandler)), throttle.WithoutTelemetry())
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodPost, emu.URL+api+"?access_token="+emu.Token(app), strings.NewReader(`{}`))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The reading runs in the background: wait for its entry.
	field := "day@" + app + " " + api
	for deadline := time.Now().Add(20 * time.Second); ; {
		if v, _ := c.HGet(ctx, "{ops:wechat}:learned", field).Result(); strings.HasPrefix(v, "250:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no reconciled limit stored within 20s")
		}
		time.Sleep(20 * time.Millisecond) // polling Redis for the background write
	}
	until := time.Now().Add(24 * time.Hour).UnixMilli()
	// In force, lapsed, and two no replica takes (lapsing past 31 days; an
	// app name over 64 bytes): only the first is shown.
	c.HSet(ctx, "{ops:feishu}:learned", "s POST /open-apis/im/v1/messages", "20:"+strconv.FormatInt(until, 10),
		"m GET /open-apis/contact/v3/users/:user_id", "5:"+strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10),
		"s GET /open-apis/planted/far", "1:"+strconv.FormatInt(time.Now().Add(40*24*time.Hour).UnixMilli(), 10),
		"s@"+strings.Repeat("a", 65)+" GET /open-apis/planted/app", "1:"+strconv.FormatInt(until, 10))
	c.Set(ctx, "{ops:feishu}:r:s:cli_x:POST /open-apis/im/v1/messages", strconv.FormatInt(time.Now().UnixMicro(), 10), time.Hour)

	out, stderr, code := ctl(t, "", "-redis", srv.Addr, "-prefix", "ops", "status")
	if code != 0 {
		t.Fatalf("status: exit %d; stderr %q\n%s", code, stderr, out)
	}
	t.Logf("status:\n%s", out)
	for _, want := range []string{"learned limits: 1 in force", api, app, "250", "quota/get (reconciled)",
		"POST /open-apis/im/v1/messages", "99991400 (x-ogw-ratelimit-limit)", "(all)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	if strings.Contains(out, "/open-apis/contact/v3/users") {
		t.Error("status shows a lapsed learned limit")
	}
	if strings.Contains(out, "/open-apis/planted") {
		t.Error("status shows a learned limit every replica drops as garbled")
	}
	if strings.Contains(out, emu.Token(app)[:8]) {
		t.Error("status shows a token")
	}
	out, stderr, code = ctl(t, "", "-redis", srv.Addr, "-prefix", "ops", "status", "-json")
	var st struct {
		Groups  []json.RawMessage
		Learned map[string][]struct {
			API, App, Window, Source string
			Limit                    int
			Until                    time.Time
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("status -json: exit %d, %v; stderr %q", code, err, stderr)
	}
	w := st.Learned["wechat"]
	if len(st.Groups) == 0 || len(w) != 1 || w[0].App != app || w[0].Limit != 250 || w[0].Window != "day" || w[0].Until.Before(time.Now().Add(23*time.Hour)) {
		t.Fatalf("status -json learned: %+v; want wechat's reconciled 250/day for %s, expiring in a day", st.Learned, app)
	}
	if f := st.Learned["feishu"]; len(f) != 1 || f[0].Limit != 20 || f[0].App != "" {
		t.Fatalf("status -json learned feishu: %+v; want the one in force", f)
	}
}
