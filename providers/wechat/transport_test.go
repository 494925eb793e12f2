package wechat_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/internal/emulator"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// TestTransport runs the preset in the Transport against the emulator: the
// daily quota holds on our side, and a 45009 from WeChat (a quota smaller
// than configured) stops further calls without reaching WeChat.
func TestTransport(t *testing.T) {
	tests := []struct {
		name            string
		ours, theirs    int
		wantErr         error
		wantSent, want0 int
	}{
		{"our quota binds first", 3, 100, throttle.ErrThrottled, 3, 3},
		{"theirs is smaller: penalised after one 45009", 100, 2, throttle.ErrPenalized, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{Daily: map[string]int{"/cgi-bin/user/info": tc.theirs}}, Clock: emulator.NewManualClock(time.Now()).Now})
			defer s.Close()
			u, _ := url.Parse(s.URL)
			p := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: "wxapp", Daily: map[string]int{"/cgi-bin/user/info": tc.ours}}}}).Profile()
			tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithMaxWait(50*time.Millisecond),
				throttle.WithLogger(slog.New(slog.DiscardHandler)))
			defer tr.Close()
			client := &http.Client{Transport: tr}
			tok := s.Token("wxapp")
			var err error
			for i := 0; i < 6 && err == nil; i++ {
				var resp *http.Response
				resp, err = client.Get(s.URL + "/cgi-bin/user/info?access_token=" + tok + "&openid=o1")
				if err == nil {
					resp.Body.Close()
				}
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			c := s.Counters()
			if c.Total != tc.wantSent || c.OK != tc.want0 {
				t.Errorf("emulator saw %+v, want %d calls, %d accepted", c, tc.wantSent, tc.want0)
			}
		})
	}
}
