package dingtalk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// A group robot's alert storms: bursts of 6, 12 and 20 messages (two of
// each) at random times over three of the robot's windows, from four
// replicas. The robot window is a minute scaled down 20× (3 s) in both the
// emulator and the preset, so the run takes seconds; the preset's jitter
// allowance is 100 ms (see jitter below). The emulator counts every window
// of that length (sliding, the strictest reading of "20 per minute") and
// answers 410100 past 20.
//
// The emulator rejects nothing, and every burst that fits the window's
// allowance goes out with no wait beyond the jitter allowance: the waits
// are the ones the limiter scheduled (span attribute throttle.wait_s), so a
// loaded machine cannot fail the test by running late.
func TestRobotBursts(t *testing.T) {
	const (
		scale    = 20
		window   = time.Minute / scale
		replicas = 4
		minGap   = 300 * time.Millisecond // bursts this far apart never interleave
		// margin widens the window when judging whether a burst fits: a
		// reservation comes a little after its call was made.
		margin = 100 * time.Millisecond
		// jitter is the preset's allowance for the spread of the time from
		// a slot to the provider's count: the emulated latency (0-20 ms)
		// plus how late a send wakes on this machine, which under the race
		// detector on two shared cores reaches tens of milliseconds.
		jitter = 100 * time.Millisecond
	)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	sizes := []int{6, 12, 20, 6, 12, 20}
	rng.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
	at := randomTimes(rng, len(sizes), 3*window, minGap)

	app := "dingrobot" + fmt.Sprint(seed%100000)
	emu := dingtalktest.New(dingtalktest.Options{
		RobotWindow: window, TimeScale: scale, LatencyMax: latency,
		Tokens: map[string]string{"tok-" + app: app},
	})
	t.Cleanup(emu.Close)
	profile := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, RobotWindow: window, Jitter: jitter, Apps: []dingtalk.App{{AppKey: app}}}).Profile()
	clients, waits := loadtest.TracedReplicas(t, replicas, throttle.WithProfiles(profile))
	robotURL := emu.URL + "/robot/send?access_token=robot-" + app

	type message struct {
		burst int
		made  time.Time // when the call was made: its reservation came later
		id    trace.SpanID
		code  string
		err   error
	}
	var (
		mu   sync.Mutex
		msgs []message
		wg   sync.WaitGroup
	)
	// Warm up another robot first: every replica opens its connections and
	// loads its scripts, so that the bursts' first sends are not late by a
	// TCP handshake each.
	var warm sync.WaitGroup
	for _, c := range clients {
		for range 5 {
			warm.Add(1)
			go func() {
				defer warm.Done()
				resp, err := c.Post(emu.URL+"/robot/send?access_token=warmup-"+app, "application/json",
					strings.NewReader(`{"msgtype":"text","text":{"content":"hello"}}`))
				if err != nil {
					t.Errorf("warm-up: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
	}
	warm.Wait()

	fired := make([]time.Time, len(sizes))
	start := time.Now()
	for b, size := range sizes {
		time.Sleep(time.Until(start.Add(at[b]))) // the arrival process, not synchronisation
		fired[b] = time.Now()
		for range size {
			client := clients[rng.IntN(replicas)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, id, end := waits.Start(context.Background())
				defer end()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, robotURL,
					strings.NewReader(`{"msgtype":"text","text":{"content":"disk full on db-3"}}`))
				req.Header.Set("Content-Type", "application/json")
				m := message{burst: b, id: id, made: time.Now()}
				resp, err := client.Do(req)
				if err != nil {
					m.err = err
				} else {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					m.code = answerCode(resp.StatusCode, body)
				}
				mu.Lock()
				msgs = append(msgs, m)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()

	recs := emu.Requests()
	st := emu.Stats()
	delivered := 0
	for _, r := range recs {
		if r.Code != "" {
			t.Errorf("the emulator answered %s at %v with %s", r.Path, r.At.Format(time.StampMicro), r.Code)
		}
		if r.Path == "/robot/send" && r.Code == "" && !r.At.Before(start) {
			delivered++
		}
	}
	if st.Rejected != 0 {
		t.Errorf("the emulator rejected %d robot messages (410100), want none", st.Rejected)
	}

	// Each delivered message's slot, as scheduled: when its call was made
	// plus the wait the limiter gave it (the reservation came a little
	// after the call was made; margin covers that).
	recorded := waits.Of()
	slot := func(m message) time.Time { return m.made.Add(recorded[m.id].Scheduled) }
	allowance := jitter
	fits, fitted, delayed := 0, 0, 0
	for b, size := range sizes {
		// The messages of earlier bursts whose slots lie less than the
		// rule's window before this burst, or after it: the burst fits
		// the window's allowance when they leave room for all of it.
		from := fired[b].Add(-window - allowance - margin)
		before := 0
		for _, m := range msgs {
			if m.burst < b && m.err == nil && m.code == "" && slot(m).After(from) {
				before++
			}
		}
		var worst time.Duration
		failed := 0
		for _, m := range msgs {
			if m.burst != b {
				continue
			}
			if m.err != nil || m.code != "" {
				failed++
				if !errors.Is(m.err, throttle.ErrThrottled) {
					t.Errorf("burst %d: message failed: code %q err %v", b, m.code, m.err)
				}
			}
			worst = max(worst, recorded[m.id].Scheduled)
		}
		fit := before+size <= 20
		t.Logf("burst %d at %6v: %2d messages, %2d slots in the window before it, fits %-5v: longest scheduled wait %v, %d throttled",
			b, at[b].Round(time.Millisecond), size, before, fit, worst, failed)
		if fit {
			fits++
			if worst <= allowance && failed == 0 {
				fitted++
			} else {
				t.Errorf("burst %d of %d fits the window's allowance (%d slots before it) but waited up to %v (allowance %v), %d throttled",
					b, size, before, worst, allowance, failed)
			}
		} else if worst > 0 || failed > 0 {
			delayed++
		}
	}
	sent := delivered
	t.Logf("seed %d: %d bursts, %d fit the window and went at once (%d), %d waited for room; %d messages delivered, emulator %d requests, %d rejected",
		seed, len(sizes), fits, fitted, delayed, sent, st.Requests, st.Rejected)
	if fits == 0 {
		t.Errorf("no burst fitted the window: the test proved nothing")
	}
}

// randomTimes returns n sorted offsets in [0, d), at least gap apart.
func randomTimes(rng *rand.Rand, n int, d, gap time.Duration) []time.Duration {
	for {
		at := make([]time.Duration, n)
		for i := range at {
			at[i] = time.Duration(rng.Int64N(int64(d)))
		}
		slices.Sort(at)
		ok := true
		for i := 1; i < n; i++ {
			if at[i]-at[i-1] < gap {
				ok = false
			}
		}
		if ok {
			return at
		}
	}
}
