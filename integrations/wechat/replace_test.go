package wechat_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/silenceper/wechat/v2/util"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/wechat"
	"github.com/quotaware/throttle/internal/redistest"
	presetwechat "github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// silenceper/wechat keeps its token until its own cache lapses, whatever
// WeChat answers: on 40001 it neither drops it nor exchanges. When another
// replica's exchange rotated the fleet's token (WeChat's /cgi-bin/token
// issues a new one and keeps the old one 5 minutes), this replica's SDK
// used to fail every call until its cache lapsed. Now the first call fails
// as WeChat answered it, and the SDK's calls after it go with the token the
// fleet keeps, with no exchange more.
func TestSDKHoldingARotatedTokenRecovers(t *testing.T) {
	prev := util.DefaultHTTPClient
	t.Cleanup(func() { util.DefaultHTTPClient = prev })
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{appID: appSecret}})
	t.Cleanup(emu.Close)
	srv := redistest.Start(t)
	replica := func() *throttle.Transport {
		tr := throttle.MustNew(
			throttle.WithRedis(srv.Client(t)),
			throttle.WithBase(sdktest.Redirect(emu.URL)),
			throttle.WithProfiles(presetwechat.MustNew(presetwechat.Config{
				Apps: []presetwechat.App{{AppID: appID}},
			}).Profile()),
		)
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	here, other := replica(), replica()
	wechat.Use(here)
	oa := officialAccount()
	user := oa.GetUser()
	if _, err := user.GetUserInfo(openID); err != nil {
		t.Fatal(err)
	}
	held, err := oa.GetContext().GetAccessToken()
	if err != nil {
		t.Fatal(err)
	}

	// The kept answer ends (a Margin before its token) and the other
	// replica's SDK exchanges: WeChat issues a new token, and the old one's
	// grace ends while this replica's SDK still holds it.
	ctx := context.Background()
	rdb := srv.Client(t)
	var keys []string
	iter := rdb.Scan(ctx, 0, "*:token:*", 0).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !strings.HasSuffix(k, ":lock") && !strings.HasSuffix(k, ":heal") {
			keys = append(keys, k)
		}
	}
	if len(keys) != 1 {
		t.Fatalf("kept answers %q, want the one of the account", keys)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: other}).Get("https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=" + appID + "&secret=" + appSecret)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if emu.Token(appID) == held {
		t.Fatal("the other replica's exchange did not rotate the token")
	}
	emu.Revoke(held)

	if _, err := user.GetUserInfo(openID); err == nil || !strings.Contains(err.Error(), "40001") {
		t.Fatalf("the first call with the rotated token: %v, want WeChat's 40001 as it answered", err)
	}
	for i := range 5 {
		if _, err := user.GetUserInfo(openID); err != nil {
			t.Fatalf("call %d after the refusal: %v, want it sent with the fleet's token", i, err)
		}
	}
	if now, _ := oa.GetContext().GetAccessToken(); now != held {
		t.Fatalf("the SDK's cache holds %q: the test meant it to keep the rotated token", now)
	}
	if n := emu.Fetches(appID, "/cgi-bin/token"); n != 2 {
		t.Fatalf("%d fetches at WeChat, want 2 (the SDK's and the other replica's)", n)
	}
}
