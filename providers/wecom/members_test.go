package wecom_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// Two replicas on one Redis send app messages that all reach one member,
// alice, addressed five ways: "alice", "Alice" (WeCom's UserIDs ignore
// case), "@all" (the company is alice and bob), a party she belongs to, and
// her name with the agentid after 5 KiB of content. The emulator, 60 times
// faster than the wall clock (an emulated minute lasts one second), counts
// every member each message reaches against its own 30 a minute and drops
// the excess silently, as WeCom does: no message may be dropped. The
// callers fire three emulated minutes' worth of messages at once; what the
// limits cannot fit is refused locally (ErrThrottled), never sent.
func TestMemberLimitsHoweverAddressed(t *testing.T) {
	const (
		replicas = 2
		each     = 30 // messages per way of addressing
		scale    = 60
	)
	corp := "ww" + limitertest.Group(t)
	emu := wecomtest.NewServer(wecomtest.Options{
		TimeScale: scale,
		Members:   []string{"alice", "bob"}, Parties: map[string][]string{"7": {"Alice"}},
	})
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	// The preset's limits are written per real minute and hour (60 times
	// the documented ones, 2 a minute under them for wake-up lateness), so
	// the run does not rest on the preset's own time scaling.
	profile := wecom.MustNew(wecom.Config{Hosts: []string{u.Hostname()}, Apps: []wecom.App{{CorpID: corp, PerMemberPerMinute: 28 * scale, PerMemberPerHour: 1000 * scale, BroadcastPerMinute: 4 * scale, BroadcastPerHour: 100 * scale}}}).Profile()
	clients := loadtest.Replicas(t, replicas, throttle.WithProfiles(profile), throttle.WithMaxWait(3*time.Second))
	token := emu.Token(corp)

	bodies := []string{
		`{"touser":"alice","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`,
		`{"touser":"Alice","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`,
		`{"touser":"@all","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`,
		`{"toparty":"7","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`,
		`{"touser":"alice","msgtype":"text","text":{"content":"` + strings.Repeat("x", 5<<10) + `"},"agentid":1000002}`,
	}
	var (
		mu      sync.Mutex
		results []loadtest.Result
		wg      sync.WaitGroup
	)
	for i := range each * len(bodies) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost,
				emu.URL+"/cgi-bin/message/send?access_token="+token, strings.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Content-Type", "application/json")
			r := loadtest.Send(clients[i%replicas], req, "errcode")
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	tl := loadtest.Count(results, func(code int) bool { return code == wecomtest.CodeFreq })
	dropped, sent := 0, 0
	for _, r := range emu.Requests() {
		if r.Path == "/cgi-bin/message/send" {
			sent++
			dropped += r.Dropped
		}
	}
	t.Logf("callers: %v; emulator: %d messages sent, %d deliveries dropped", tl, sent, dropped)
	if dropped != 0 {
		t.Errorf("WeCom dropped %d deliveries to alice: her 30 a minute was exceeded", dropped)
	}
	// The limits fit at least 25 + 5 a minute; the run's budget spans
	// about three minutes.
	if sent < 60 {
		t.Errorf("only %d messages sent in three emulated minutes, want at least 60", sent)
	}
}
