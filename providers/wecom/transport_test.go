package wecom_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// TestTransport runs the preset in the Transport against the emulator: a
// 45009 penalises the API of the company on our side, so the next call fails
// fast without reaching WeCom, while another API still goes through.
func TestTransport(t *testing.T) {
	s := wecomtest.NewServer(wecomtest.Options{Limits: wecomtest.Limits{CorpPerMinute: 2}})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := wecom.MustProfile(wecom.Config{CorpID: "wwcorp", Hosts: []string{u.Hostname()}})
	tr := throttle.New(throttle.WithProfiles(p), throttle.WithMaxWait(50*time.Millisecond),
		throttle.WithLogger(slog.New(slog.DiscardHandler)))
	defer tr.Close()
	client := &http.Client{Transport: tr}
	tok := s.Token("wwcorp")
	get := func(path string) error {
		resp, err := client.Get(s.URL + path + "?access_token=" + tok)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for i := range 3 { // the third answers 45009
		if err := get("/cgi-bin/user/get"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := get("/cgi-bin/user/get"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("after a 45009: %v", err)
	}
	if err := get("/cgi-bin/department/list"); err != nil {
		t.Fatalf("another API: %v", err)
	}
	if c := s.Counters(); c.Total != 4 || c.ByCode[wecomtest.CodeFreq] != 1 {
		t.Errorf("emulator saw %+v", c)
	}
}
