package wecom_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/internal/emulator"
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// TestTransport runs the preset in the Transport against the emulator: a
// 45009 penalises the API of the company on our side, so the next call fails
// fast without reaching WeCom, while another API still goes through. The
// emulator's clock stands still: its calendar minute must not roll over
// between the calls that fill it.
func TestTransport(t *testing.T) {
	s := wecomtest.NewServer(wecomtest.Options{Limits: wecomtest.Limits{CorpPerMinute: 2}, Clock: emulator.NewManualClock(time.Now()).Now})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := wecom.MustNew(wecom.Config{Hosts: []string{u.Hostname()}, Apps: []wecom.App{{CorpID: "wwcorp"}}}).Profile()
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithMaxWait(50*time.Millisecond),
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

// TestTransportInFlightCap: with MaxInFlight at WeCom's concurrency limit,
// three replicas sharing one limiter never draw a 45033; without it, the
// same load does. Every call eventually succeeds.
func TestTransportInFlightCap(t *testing.T) {
	run := func(maxInFlight int) wecomtest.Counters {
		s := wecomtest.NewServer(wecomtest.Options{
			Limits: wecomtest.Limits{CorpPerMinute: 100000, CorpPerHour: 1000000, IPPerMinute: 100000, IPPerHour: 1000000, MaxConcurrent: 3},
			Hold:   30 * time.Millisecond,
		})
		defer s.Close()
		u, _ := url.Parse(s.URL)
		p := wecom.MustNew(wecom.Config{Hosts: []string{u.Hostname()}, Apps: []wecom.App{{CorpID: "wwcorp", MaxInFlight: maxInFlight, NoPerMemberLimit: true}}}).Profile() // the calls go to one member: the member limit is not under test
		lim := limiter.NewMemory()
		tok := s.Token("wwcorp")
		var wg sync.WaitGroup
		for r := 0; r < 3; r++ {
			tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithLimiter(lim), throttle.WithoutRetry(),
				throttle.WithMaxWait(10*time.Second), throttle.WithLogger(slog.New(slog.DiscardHandler)))
			client := &http.Client{Transport: tr}
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 5; i++ {
						resp, err := client.Get(s.URL + "/cgi-bin/message/send?access_token=" + tok)
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
					}
				}()
			}
		}
		wg.Wait()
		return s.Counters()
	}
	if c := run(3); c.ByCode[wecomtest.CodeConcurrent] != 0 || c.OK != 60 {
		t.Errorf("with MaxInFlight 3: %+v, want 60 OK and no 45033", c)
	}
	if c := run(0); c.ByCode[wecomtest.CodeConcurrent] == 0 {
		t.Errorf("without a cap: %+v, want some 45033 (else this test proves nothing)", c)
	}
}

// A token exchange WeCom refuses (a wrong secret) holds that secret's next
// for FailedTokenPenalty: an SDK retrying a wrong secret in a loop sent
// every failure on, toward WeCom's interception of a caller that keeps
// failing (a 1 h block after about 2,000 failed calls an hour, reported).
// The refused answer reaches the caller as WeCom sent it, not retried (a
// retry would only repeat it), and the company's other secrets go on.
func TestFailedTokenExchangeHoldsTheNext(t *testing.T) {
	s := wecomtest.NewServer(wecomtest.Options{Corps: map[string][]string{"wwcorp": {"right"}}})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := wecom.MustNew(wecom.Config{Hosts: []string{u.Hostname()}, Apps: []wecom.App{{CorpID: "wwcorp"}}}).Profile()
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithLogger(slog.New(slog.DiscardHandler)))
	defer tr.Close()
	client := &http.Client{Transport: tr}
	exchange := func(ctx context.Context, secret string) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/cgi-bin/gettoken?corpid=wwcorp&corpsecret="+secret, nil)
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	ctx := context.Background()
	body, err := exchange(ctx, "wrong")
	if err != nil || !strings.Contains(body, `"errcode":40001`) {
		t.Fatalf("the refused exchange: %q, %v; want WeCom's 40001 answer", body, err)
	}
	if c := s.Counters(); c.Total != 1 {
		t.Fatalf("WeCom saw %d exchanges for one refused call, want 1 (not retried)", c.Total)
	}
	if body, err := exchange(ctx, "right"); err != nil || !strings.Contains(body, `"errcode":0`) {
		t.Fatalf("another secret of the company: %q, %v; want it exchanged at once", body, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := exchange(short, "wrong"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("the wrong secret again: %v, want it held (ErrPenalized)", err)
	}
	if c := s.Counters(); c.Total != 2 {
		t.Fatalf("WeCom saw %d exchanges, want 2 (the refused one and the other secret's)", c.Total)
	}
}
