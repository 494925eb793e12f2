package defaulttransport_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"

	sdk "github.com/zhaoyunxing92/dingtalk/v2"
	"github.com/zhaoyunxing92/dingtalk/v2/cache"
	"github.com/zhaoyunxing92/dingtalk/v2/request"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// newZhaoyunxing92 returns the SDK's client with its token cached in memory
// (its default is a file under the working directory).
func newZhaoyunxing92(t *testing.T) *sdk.DingTalk {
	c, err := sdk.NewClient(appKey, appSecret, sdk.WithCache(&memCache{}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Three times the per-API limit at once through github.com/zhaoyunxing92/dingtalk/v2:
// every call is answered and parsed, and the emulator rejects none.
func TestZhaoyunxing92AboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}})
	c := newZhaoyunxing92(t)
	if _, err := c.GetAccessToken(); err != nil {
		t.Fatal(err)
	}
	errs := sdktest.Fire(60, 20, func(int) error {
		u, err := c.GetUserDetail(request.NewUserDetail("manager4220").Build())
		if err == nil && (u.Code != 0 || u.UserId != "manager4220" || u.Name != "张三") {
			t.Errorf("user parsed as %+v", u)
		}
		return err
	})
	sdktest.NoErrors(t, errs)
	if st := emu.Stats(); st.Rejected != 0 || st.Bans != 0 || st.Requests != 61 {
		t.Fatalf("emulator: %+v, want 61 requests and no rejection", st)
	}
}

func TestZhaoyunxing92Errors(t *testing.T) {
	emu := newEmulator(t)
	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}, throttle.WithMaxWait(0))
	c := newZhaoyunxing92(t)
	if _, err := c.GetAccessToken(); err != nil {
		t.Fatal(err)
	}
	sdktest.UntilThrottled(t, 1000, func() error {
		_, err := c.GetUserDetail(request.NewUserDetail("manager4220").Build())
		return err
	})

	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}})
	emu.Ban()
	_, _ = c.GetUserDetail(request.NewUserDetail("manager4220").Build()) // the ban page: the egress IP is penalised
	_, err := c.GetUserDetail(request.NewUserDetail("manager4220").Build())
	sdktest.Penalized(t, err)
}

// memCache is the SDK's cache.Cache in memory.
type memCache struct {
	mu   sync.Mutex
	data []byte
}

var _ cache.Cache = (*memCache)(nil)

func (m *memCache) Set(v cache.Expired) error {
	b, err := json.Marshal(v)
	m.mu.Lock()
	m.data = b
	m.mu.Unlock()
	return err
}

func (m *memCache) Get(v cache.Expired) error {
	m.mu.Lock()
	b := m.data
	m.mu.Unlock()
	if b == nil {
		return errors.New("empty")
	}
	return json.Unmarshal(b, v)
}
