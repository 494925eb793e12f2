package wechat_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// Two replicas on one redis-server, an account whose daily quota of an API
// is spent (another client took part of it, so WeChat answers 45009 before
// the preset's count is reached): the 45009 stops the API on both replicas
// until midnight. A clear_quota sent through one replica ends it on both:
// the penalty is lifted (the other replica's breaker closes) and the day's
// count starts again, so the API takes the quota again, and the preset
// keeps it to the quota without another 45009.
func TestClearQuotaEndsThePenaltyAndTheCountOnEveryReplica(t *testing.T) {
	skipNearBeijingMidnight(t)
	const quota = 3
	app := "wx" + limitertest.Group(t)
	emu := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{Daily: map[string]int{recAPI: quota}}})
	t.Cleanup(emu.Close)
	emu.Spend(app, recAPI, 1)
	u, _ := url.Parse(emu.URL)
	cfg := wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: app, Daily: map[string]int{recAPI: quota}}}}
	clients := loadtest.Replicas(t, 2, throttle.WithProfiles(wechat.MustNew(cfg).Profile()))
	token := emu.Token(app)
	ctx := context.Background()
	post := func(c *http.Client, path, body string) (int, error) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, emu.URL+path+"?access_token="+token, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(raw), `"errcode":0`) {
			return 0, nil
		}
		return -1, nil
	}
	send := func(c *http.Client) (int, error) {
		return post(c, recAPI, `{"touser":"o6_bmjrPTlm6","msgtype":"text"}`)
	}
	a, b := clients[0], clients[1]
	for i := range quota - 1 {
		if code, err := send(a); code != 0 || err != nil {
			t.Fatalf("call %d within WeChat's quota: %d, %v", i, code, err)
		}
	}
	if code, err := send(a); code == 0 || err != nil {
		t.Fatalf("the call past WeChat's quota: %d, %v; want its 45009 answer", code, err)
	}
	// The penalty is written to Redis off the request path: wait until
	// the other replica meets it (its count is full, so until then it is
	// refused as throttled).
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := send(b)
		if errors.Is(err, throttle.ErrPenalized) {
			break
		}
		if !errors.Is(err, throttle.ErrThrottled) || time.Now().After(deadline) {
			t.Fatalf("the other replica after the 45009: %v, want it penalised", err)
		}
	}
	if code, err := post(a, wechattest.ClearQuotaPath, `{"appid":"`+app+`"}`); code != 0 || err != nil {
		t.Fatalf("clear_quota: %d, %v", code, err)
	}
	// The replica that sent the reset finds it done at once.
	if code, err := send(a); code != 0 || err != nil {
		t.Fatalf("the first call after the reset, on its replica: %d, %v", code, err)
	}
	// The other closes its breaker once it hears the lift.
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, err := send(b)
		if err == nil && code == 0 {
			break
		}
		if !errors.Is(err, throttle.ErrPenalized) || time.Now().After(deadline) {
			t.Fatalf("the other replica after the reset: %d, %v; want its call through", code, err)
		}
	}
	// One call of the new count is left; the one after it is the preset's
	// to refuse, not WeChat's.
	if code, err := send(a); code != 0 || err != nil {
		t.Fatalf("the quota's last call after the reset: %d, %v", code, err)
	}
	if _, err := send(b); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("a call past the quota after the reset: %v, want it refused here", err)
	}
	var dailies int
	for _, r := range emu.Requests() {
		if r.Path == recAPI && r.Code == wechattest.CodeDailyQuota {
			dailies++
		}
	}
	if dailies != 1 {
		t.Fatalf("WeChat answered 45009 %d times, want once (before the reset)", dailies)
	}
}

// The month's resets spent, WeChat answers 48006; the preset stops resets
// until the 1st, so the next is refused here rather than sent to fail.
func TestClearQuotaPastTheMonthsResetsStopsThem(t *testing.T) {
	skipNearBeijingMidnight(t)
	app := "wx" + limitertest.Group(t)
	emu := wechattest.NewServer(wechattest.Options{})
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	cfg := wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: app}}}
	client := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(wechat.MustNew(cfg).Profile()))}
	clear := func() (string, error) {
		req, _ := http.NewRequest(http.MethodPost, emu.URL+wechattest.ClearQuotaPath+"?access_token="+emu.Token(app),
			strings.NewReader(`{"appid":"`+app+`"}`))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw), nil
	}
	for i := range wechattest.ClearQuotaMonthly {
		if body, err := clear(); err != nil || !strings.Contains(body, `"errcode":0`) {
			t.Fatalf("reset %d of the month: %s, %v", i+1, body, err)
		}
	}
	if body, err := clear(); err != nil || !strings.Contains(body, `"errcode":48006`) {
		t.Fatalf("the reset past the month's: %s, %v; want WeChat's 48006", body, err)
	}
	if _, err := clear(); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("the next reset: %v, want it refused here", err)
	}
	if n := len(emu.Requests()); n != wechattest.ClearQuotaMonthly+1 {
		t.Fatalf("WeChat saw %d resets, want %d", n, wechattest.ClearQuotaMonthly+1)
	}
}

// skipNearBeijingMidnight skips a test of day or month counts that could
// cross WeChat's midnight (Asia/Shanghai) while it runs.
func skipNearBeijingMidnight(t *testing.T) {
	now := time.Now().In(time.FixedZone("CST", 8*3600))
	if now.Hour() == 23 && now.Minute() == 59 || now.Hour() == 0 && now.Minute() == 0 {
		t.Skip("too close to midnight in Beijing: the day's counts would start again mid-test")
	}
}

// Without Redis (the in-process limiter) a reset ends the penalty and the
// count as it does for a fleet.
func TestClearQuotaInProcess(t *testing.T) {
	skipNearBeijingMidnight(t)
	const quota = 2
	app := "wx" + limitertest.Group(t)
	emu := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{Daily: map[string]int{recAPI: quota}}})
	t.Cleanup(emu.Close)
	emu.Spend(app, recAPI, 1)
	u, _ := url.Parse(emu.URL)
	cfg := wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: app, Daily: map[string]int{recAPI: quota}}}}
	tr := throttle.MustNew(throttle.WithProfiles(wechat.MustNew(cfg).Profile()), throttle.WithMaxWait(time.Second))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	post := func(path, body string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, emu.URL+path+"?access_token="+emu.Token(app), strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw), nil
	}
	send := func() (string, error) { return post(recAPI, `{"touser":"o6_bmjrPTlm6","msgtype":"text"}`) }
	if body, err := send(); err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("the call within the quota: %s, %v", body, err)
	}
	if body, err := send(); err != nil || !strings.Contains(body, `"errcode":45009`) {
		t.Fatalf("the call past WeChat's quota: %s, %v", body, err)
	}
	if _, err := send(); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("after the 45009: %v, want it penalised", err)
	}
	if body, err := post(wechattest.ClearQuotaPath, `{"appid":"`+app+`"}`); err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("clear_quota: %s, %v", body, err)
	}
	for i := range quota {
		if body, err := send(); err != nil || !strings.Contains(body, `"errcode":0`) {
			t.Fatalf("call %d after the reset: %s, %v", i, body, err)
		}
	}
	if _, err := send(); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("past the quota after the reset: %v, want it refused here", err)
	}
}
