package defaulttransport_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/faabiosr/cachego/sync"
	"github.com/fastwego/dingding"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// newFastwego returns the SDK's client for the app. Its token fetch always
// goes through http.DefaultClient; its API calls through Client.HttpClient,
// which is http.DefaultClient too unless set. dingding.Logger is silenced:
// it prints every URL, access tokens included.
func newFastwego() *dingding.Client {
	dingding.Logger = nil
	return dingding.NewClient(&dingding.DefaultAccessTokenManager{
		Id:   appKey,
		Name: "access_token",
		GetRefreshRequestFunc: func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, dingding.ServerUrl+"/gettoken?appkey="+appKey+"&appsecret="+appSecret, nil)
			return req
		},
		Cache: sync.New(),
	})
}

func fastwegoUser(c *dingding.Client) error {
	req, _ := http.NewRequest(http.MethodGet, "/user/get?userid=manager4220", nil)
	body, err := c.Do(req)
	if err != nil {
		return err
	}
	var u struct {
		Errcode int    `json:"errcode"`
		UserID  string `json:"userid"`
		Name    string `json:"name"`
	}
	if err := json.Unmarshal(body, &u); err != nil || u.Errcode != 0 || u.UserID != "manager4220" || u.Name != "张三" {
		return fmt.Errorf("user parsed as %+v (%v) from %s", u, err, body)
	}
	return nil
}

// Three times the per-API limit at once through github.com/fastwego/dingding,
// token fetch included: every call is answered and parsed, and the
// emulator rejects none.
func TestFastwegoAboveTheLimit(t *testing.T) {
	emu := newEmulator(t)
	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}})
	c := newFastwego()
	sdktest.NoErrors(t, sdktest.Fire(60, 20, func(int) error { return fastwegoUser(c) }))
	if st := emu.Stats(); st.Rejected != 0 || st.Bans != 0 || st.Requests != 61 {
		t.Fatalf("emulator: %+v, want 61 requests (the token and 60 calls) and no rejection", st)
	}
}

func TestFastwegoErrors(t *testing.T) {
	emu := newEmulator(t)
	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}, throttle.WithMaxWait(0))
	c := newFastwego()
	sdktest.UntilThrottled(t, 1000, func() error { return fastwegoUser(c) })

	install(t, emu, dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}})
	emu.Ban()
	_ = fastwegoUser(c) // the ban page: the egress IP is penalised
	sdktest.Penalized(t, fastwegoUser(c))
}
