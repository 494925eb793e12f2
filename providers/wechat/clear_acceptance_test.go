package wechat_test

import (
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
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// resetAccount is one account in the emulator and in the preset, with a
// daily quota of recAPI in both (none when quota is 0), spent of it by
// another client before the test.
type resetAccount struct {
	emu     *wechattest.Server
	app     string
	profile providers.Profile
}

func newResetAccount(t *testing.T, quota, spent int) resetAccount {
	t.Helper()
	skipNearBeijingMidnight(t)
	a := resetAccount{app: "wx" + limitertest.Group(t)}
	var opts wechattest.Options
	app := wechat.App{AppID: a.app}
	if quota > 0 {
		opts.Limits = wechattest.Limits{Daily: map[string]int{recAPI: quota}}
		app.Daily = map[string]int{recAPI: quota}
	}
	a.emu = wechattest.NewServer(opts)
	t.Cleanup(a.emu.Close)
	a.emu.Spend(a.app, recAPI, spent)
	u, _ := url.Parse(a.emu.URL)
	a.profile = wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{app}}).Profile()
	return a
}

// post sends body to path with the account's token through c and returns
// the answer's body.
func (a resetAccount) post(c *http.Client, path, body string) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, a.emu.URL+path+"?access_token="+a.emu.Token(a.app), strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw), nil
}

func (a resetAccount) send(c *http.Client) (string, error) {
	return a.post(c, recAPI, `{"touser":"o6_bmjrPTlm6","msgtype":"text"}`)
}

func (a resetAccount) clear(c *http.Client) (string, error) {
	return a.post(c, wechattest.ClearQuotaPath, `{"appid":"`+a.app+`"}`)
}

func answeredOK(body string) bool { return strings.Contains(body, `"errcode":0`) }

// Two replicas on one redis-server, an account whose daily quota of an API
// is spent (another client took part of it, so WeChat answers 45009 before
// the preset's count is reached): the 45009 stops the API on both replicas
// until midnight. A clear_quota sent through one replica ends it on both:
// the penalty is lifted (the other replica's breaker closes) and the day's
// count starts again, so the API takes the quota again, and the preset
// keeps it to the quota without another 45009.
func TestClearQuotaEndsThePenaltyAndTheCountOnEveryReplica(t *testing.T) {
	const quota = 3
	acc := newResetAccount(t, quota, 1)
	clients := loadtest.Replicas(t, 2, throttle.WithProfiles(acc.profile))
	a, b := clients[0], clients[1]
	for i := range quota - 1 {
		if body, err := acc.send(a); !answeredOK(body) || err != nil {
			t.Fatalf("call %d within WeChat's quota: %s, %v", i, body, err)
		}
	}
	if body, err := acc.send(a); answeredOK(body) || err != nil {
		t.Fatalf("the call past WeChat's quota: %s, %v; want its 45009 answer", body, err)
	}
	// The penalty is written to Redis off the request path: wait until
	// the other replica meets it (its count is full, so until then it is
	// refused as throttled).
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := acc.send(b)
		if errors.Is(err, throttle.ErrPenalized) {
			break
		}
		if !errors.Is(err, throttle.ErrThrottled) || time.Now().After(deadline) {
			t.Fatalf("the other replica after the 45009: %v, want it penalised", err)
		}
	}
	if body, err := acc.clear(a); !answeredOK(body) || err != nil {
		t.Fatalf("clear_quota: %s, %v", body, err)
	}
	// The replica that sent the reset finds it done at once.
	if body, err := acc.send(a); !answeredOK(body) || err != nil {
		t.Fatalf("the first call after the reset, on its replica: %s, %v", body, err)
	}
	// The other closes its breaker once it hears the lift.
	for deadline := time.Now().Add(10 * time.Second); ; {
		body, err := acc.send(b)
		if err == nil && answeredOK(body) {
			break
		}
		if !errors.Is(err, throttle.ErrPenalized) || time.Now().After(deadline) {
			t.Fatalf("the other replica after the reset: %s, %v; want its call through", body, err)
		}
	}
	// One call of the new count is left; the one after it is the preset's
	// to refuse, not WeChat's.
	if body, err := acc.send(a); !answeredOK(body) || err != nil {
		t.Fatalf("the quota's last call after the reset: %s, %v", body, err)
	}
	if _, err := acc.send(b); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("a call past the quota after the reset: %v, want it refused here", err)
	}
	var dailies int
	for _, r := range acc.emu.Requests() {
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
	acc := newResetAccount(t, 0, 0)
	client := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(acc.profile))}
	for i := range wechattest.ClearQuotaMonthly {
		if body, err := acc.clear(client); err != nil || !answeredOK(body) {
			t.Fatalf("reset %d of the month: %s, %v", i+1, body, err)
		}
	}
	if body, err := acc.clear(client); err != nil || !strings.Contains(body, `"errcode":48006`) {
		t.Fatalf("the reset past the month's: %s, %v; want WeChat's 48006", body, err)
	}
	if _, err := acc.clear(client); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("the next reset: %v, want it refused here", err)
	}
	if n := len(acc.emu.Requests()); n != wechattest.ClearQuotaMonthly+1 {
		t.Fatalf("WeChat saw %d resets, want %d", n, wechattest.ClearQuotaMonthly+1)
	}
}

// Without Redis (the in-process limiter) a reset ends the penalty and the
// count as it does for a fleet.
func TestClearQuotaInProcess(t *testing.T) {
	const quota = 2
	acc := newResetAccount(t, quota, 1)
	tr := throttle.MustNew(throttle.WithProfiles(acc.profile), throttle.WithMaxWait(time.Second))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	if body, err := acc.send(client); err != nil || !answeredOK(body) {
		t.Fatalf("the call within the quota: %s, %v", body, err)
	}
	if body, err := acc.send(client); err != nil || !strings.Contains(body, `"errcode":45009`) {
		t.Fatalf("the call past WeChat's quota: %s, %v", body, err)
	}
	if _, err := acc.send(client); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("after the 45009: %v, want it penalised", err)
	}
	if body, err := acc.clear(client); err != nil || !answeredOK(body) {
		t.Fatalf("clear_quota: %s, %v", body, err)
	}
	for i := range quota {
		if body, err := acc.send(client); err != nil || !answeredOK(body) {
			t.Fatalf("call %d after the reset: %s, %v", i, body, err)
		}
	}
	if _, err := acc.send(client); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("past the quota after the reset: %v, want it refused here", err)
	}
}

// skipNearBeijingMidnight skips a test of day or month counts that could
// cross WeChat's midnight (Asia/Shanghai) while it runs: for two minutes a
// day, so a CI run is all but never without it.
func skipNearBeijingMidnight(t *testing.T) {
	now := time.Now().In(time.FixedZone("CST", 8*3600))
	if now.Hour() == 23 && now.Minute() == 59 || now.Hour() == 0 && now.Minute() == 0 {
		t.Skip("too close to midnight in Beijing: the day's counts would start again mid-test")
	}
}
