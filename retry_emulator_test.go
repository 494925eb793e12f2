package throttle_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// The retry tests of the retry issue, against the DingTalk emulator and its
// preset rather than a stand-in.
type dingtalkRig struct {
	emu    *dingtalktest.Server
	lim    *counting
	client *http.Client
}

func newDingtalkRig(t *testing.T, emu dingtalktest.Options, opts ...throttle.Option) *dingtalkRig {
	emu.DefaultApp = "dingretry"
	s := dingtalktest.New(emu)
	t.Cleanup(s.Close)
	p := dingtalk.MustNew(dingtalk.Config{Hosts: []string{s.Host()}, Apps: []dingtalk.App{{AppKey: "dingretry"}}}).Profile()
	lim := &counting{Limiter: limiter.NewMemory()}
	all := append([]throttle.Option{throttle.WithProfiles(p), throttle.WithLimiter(lim), throttle.WithoutTelemetry(),
		throttle.WithLogger(slog.New(slog.DiscardHandler)),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})}, opts...)
	return &dingtalkRig{emu: s, lim: lim, client: &http.Client{Transport: throttle.MustNew(all...)}}
}

func (r *dingtalkRig) post(t *testing.T, path string) (*http.Response, string, error) {
	t.Helper()
	return do(t, r.client, http.MethodPost, r.emu.URL+path+"?access_token=tok", `{"userid":"u1"}`)
}

// -1 (system busy) then success: one successful call, two attempts at the
// emulator, two slots taken.
func TestDingtalkBusyThenSuccess(t *testing.T) {
	rig := newDingtalkRig(t, dingtalktest.Options{})
	rig.emu.ForceBusy(1)
	_, body, err := rig.post(t, "/topapi/v2/user/get")
	if err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("body %q err %v, want success", body, err)
	}
	if n := len(rig.emu.Requests()); n != 2 {
		t.Errorf("emulator saw %d attempts, want 2", n)
	}
	if n := rig.lim.n.Load(); n != 2 {
		t.Errorf("%d slots taken, want 2", n)
	}
}

// quotaBody is DingTalk's 90018 with the penalty's end in Beijing time.
func quotaBody(end time.Time) string {
	return fmt.Sprintf(`{"errcode":90018,"errmsg":"当前企业正在调用的此API请求总次数超过了 20 次, 处罚将在 %s 结束."}`,
		end.In(beijing).Format(time.DateTime))
}

// A penalty that ends within the budget: the call succeeds after it, and the
// retry reaches the emulator no sooner than the end DingTalk named.
func TestDingtalkShortPenaltyInsideBudget(t *testing.T) {
	rig := newDingtalkRig(t, dingtalktest.Options{}, throttle.WithMaxWait(3*time.Second))
	end := time.Now().Truncate(time.Second).Add(2 * time.Second) // 1-2 s ahead, whole seconds as DingTalk writes them
	rig.emu.FailNext(1, http.StatusOK, quotaBody(end))
	_, body, err := rig.post(t, "/topapi/v2/user/get")
	if err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("body %q err %v, want success after the penalty", body, err)
	}
	reqs := rig.emu.Requests()
	if len(reqs) != 2 {
		t.Fatalf("emulator saw %d requests, want 2", len(reqs))
	}
	if reqs[1].At.Before(end) {
		t.Errorf("retry arrived at %v, before the penalty's end %v", reqs[1].At, end)
	}
}

// The same penalty with a 500ms budget: the provider's answer at once, body
// intact, one request.
func TestDingtalkPenaltyBeyondBudget(t *testing.T) {
	rig := newDingtalkRig(t, dingtalktest.Options{}, throttle.WithMaxWait(500*time.Millisecond))
	end := time.Now().Truncate(time.Second).Add(2 * time.Second)
	want := quotaBody(end)
	rig.emu.FailNext(1, http.StatusOK, want)
	began := time.Now()
	_, body, err := rig.post(t, "/topapi/v2/user/get")
	if err != nil || body != want {
		t.Fatalf("body %q err %v, want the provider's answer byte for byte", body, err)
	}
	if d := time.Since(began); d >= 500*time.Millisecond {
		t.Errorf("took %v, want at once", d)
	}
	if n := len(rig.emu.Requests()); n != 1 {
		t.Fatalf("emulator saw %d requests, want 1", n)
	}
}

// A POST whose answer times out after it was written is sent exactly once:
// the Transport makes one attempt (one slot), and the emulator records one.
func TestDingtalkWrittenPostNotRepeated(t *testing.T) {
	base := &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond}
	defer base.CloseIdleConnections()
	rig := newDingtalkRig(t, dingtalktest.Options{LatencyMin: 300 * time.Millisecond, LatencyMax: 300 * time.Millisecond},
		throttle.WithBase(base))
	if _, _, err := rig.post(t, "/topapi/message/corpconversation/asyncsend_v2"); err == nil {
		t.Fatal("want the response-header timeout")
	}
	if n := rig.lim.n.Load(); n != 1 {
		t.Fatalf("%d attempts, want exactly one", n)
	}
	waitFor(t, 5*time.Second, func() bool { return len(rig.emu.Requests()) >= 1 })
	if n := len(rig.emu.Requests()); n != 1 {
		t.Fatalf("emulator recorded %d sends, want 1", n)
	}
}
