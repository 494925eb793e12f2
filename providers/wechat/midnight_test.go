package wechat

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// A 45009 read just after this replica's Beijing midnight, within
// DayGrace and the answer's way back, is the day WeChat counted it in,
// which has just ended: the API is stopped for a second, not for the whole
// new day (24 h when read at 00:00:03).
func TestDailyQuotaReadJustAfterMidnight(t *testing.T) {
	bj := penaltytime.Beijing()
	for _, c := range []struct {
		at   time.Time
		most time.Duration
	}{
		{time.Date(2025, 3, 10, 23, 59, 59, 0, bj), 6 * time.Second},
		{time.Date(2025, 3, 11, 0, 0, 3, 0, bj), 2 * time.Second},
		{time.Date(2025, 3, 11, 0, 0, 9, 0, bj), time.Second},
		{time.Date(2025, 3, 11, 0, 1, 0, 0, bj), 24 * time.Hour},
	} {
		p, err := New(Config{Apps: []App{{AppID: "wx1234567890abcdef"}}, Clock: func() time.Time { return c.at }})
		if err != nil {
			t.Fatal(err)
		}
		pr := p.Profile()
		req := request(http.MethodPost, "https://api.weixin.qq.com/cgi-bin/message/custom/send?access_token=TOKEN")
		route, err := pr.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		v := pr.Classify(req, response(200, `{"errcode":45009,"errmsg":"reach max api daily quota limit rid: 1-2-3"}`), &route)
		if left := v.Until.Sub(c.at); v.Kind != providers.Quota || left <= 0 || left > c.most {
			t.Errorf("45009 read at %s: %v until %s (%v), want at most %v", c.at.Format(time.TimeOnly), v.Kind, v.Until.In(bj).Format(time.DateTime), left, c.most)
		}
	}
}
