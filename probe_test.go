package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// After a penalty ends, one request probes the scope before the others go.
// The probe is the first request sent, not the first to reserve: a request
// waiting for its slot holds nothing, and a request whose slot comes while
// the probe is out waits for the probe's answer rather than being refused.

// holdKey marks a request whose limiter call heldReserve holds.
type holdKey struct{}

// heldReserve holds the Reserve of a request marked with holdKey until
// release is closed: a request waiting for its slot for as long as the
// test wants. reserved receives once each other Reserve has returned.
type heldReserve struct {
	limiter.Limiter
	entered, release chan struct{}
	reserved         chan struct{}
}

func (h *heldReserve) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	if ctx.Value(holdKey{}) != nil {
		close(h.entered)
		<-h.release
		return h.Limiter.Reserve(ctx, req)
	}
	res, err := h.Limiter.Reserve(ctx, req)
	select {
	case h.reserved <- struct{}{}:
	default:
	}
	return res, err
}

// probeSetup is a Transport over heldReserve, limiting to perSecond, and a
// provider whose first answer penalises the scope for 100 ms; it returns
// once that penalty is over.
func probeSetup(t *testing.T, rec *recorder, perSecond int) (*heldReserve, *http.Client, string) {
	t.Helper()
	var n atomic.Int64
	answer := rec.answer
	rec.answer = func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("X-Test-Penalty-Ms", "100")
			w.Header().Set("X-Test-Processed", "1")
		}
		if answer != nil {
			answer(w, r)
			return
		}
		w.Write([]byte(`{"errcode":0}`))
	}
	srv := serve(t, rec)
	h := &heldReserve{Limiter: limiter.NewMemory(), entered: make(chan struct{}), release: make(chan struct{}), reserved: make(chan struct{}, 1)}
	tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLimiter(h), throttle.WithMaxWait(20*time.Second),
		throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, perSecond, time.Second))))
	t.Cleanup(func() { tr.Close() })
	c := &http.Client{Transport: tr}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	// The penalty's end, as the refusal states it.
	_, err := get(context.Background(), c, srv.URL+"/a")
	var pe *throttle.PenaltyError
	if !errors.As(err, &pe) {
		t.Fatalf("right after the penalty: %v, want a PenaltyError", err)
	}
	<-time.After(time.Until(pe.Until) + time.Millisecond)
	select {
	case <-h.reserved:
	default:
	}
	return h, c, srv.URL + "/a"
}

// A request waiting for its slot after the penalty ended does not hold the
// scope shut: another request whose slot comes first is sent (and probes).
func TestProbeIsTakenAtTheSendNotWhileWaitingForTheSlot(t *testing.T) {
	h, c, u := probeSetup(t, &recorder{}, 1000)
	waiting := make(chan error, 1)
	go func() {
		_, err := get(context.WithValue(context.Background(), holdKey{}, true), c, u)
		waiting <- err
	}()
	<-h.entered
	if _, err := get(context.Background(), c, u); err != nil {
		t.Errorf("a request sent while another waited for its slot after the penalty: %v", err)
	}
	close(h.release)
	if err := <-waiting; err != nil {
		t.Errorf("the request that waited: %v", err)
	}
}

// A request whose slot comes while another probes the scope waits for the
// probe's answer: sent once the answer closes the scope, refused with the
// new penalty when the answer is another quota error. It never reaches the
// provider before the probe's answer.
func TestRequestMeetingAProbeWaitsForItsAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		quota   bool
		wantErr bool
	}{
		{"the probe succeeds", false, false},
		{"the probe meets another quota error", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probeIn, answerProbe := make(chan struct{}), make(chan struct{})
			var answered, early atomic.Bool
			var n atomic.Int64
			rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
				switch n.Add(1) {
				case 1: // the penalty (probeSetup)
				case 2: // the probe
					close(probeIn)
					<-answerProbe
					if tc.quota {
						w.Header().Set("X-Test-Penalty-Ms", "3600000")
						w.Header().Set("X-Test-Processed", "1")
					}
					answered.Store(true)
				default:
					if !answered.Load() {
						early.Store(true)
					}
				}
				w.Write([]byte(`{"errcode":0}`))
			}}
			h, c, u := probeSetup(t, rec, 1000)
			waits := make(chan struct{}, 1)
			throttle.OnProbeWait(t, func() { waits <- struct{}{} })
			answer := sync.OnceFunc(func() { close(answerProbe) })
			defer answer() // a test that fails early leaves no handler blocked
			probe := make(chan error, 1)
			go func() {
				_, err := get(context.Background(), c, u)
				probe <- err
			}()
			<-probeIn
			<-h.reserved // the probe's
			follower := make(chan error, 1)
			go func() {
				_, err := get(context.Background(), c, u)
				follower <- err
			}()
			select {
			case <-waits:
			case err := <-follower:
				t.Fatalf("a request that came while the probe was out: %v before it waited for the probe", err)
			}
			select {
			case <-h.reserved:
				t.Error("a request that came while the probe was out booked its slots before waiting for the answer")
			default:
			}
			answer()
			if err := <-probe; err != nil {
				t.Fatalf("the probe: %v", err)
			}
			err := <-follower
			if early.Load() {
				t.Error("a request reached the provider before the probe's answer")
			}
			switch {
			case !tc.wantErr && err != nil:
				t.Errorf("after the probe's success: %v, want sent", err)
			case tc.wantErr:
				var pe *throttle.PenaltyError
				if !errors.As(err, &pe) || pe.RetryAfter() < 30*time.Minute {
					t.Errorf("after the probe's quota error: %v, want the new hour's penalty", err)
				}
				if n.Load() != 2 {
					t.Errorf("the provider got %d requests, want the penalty's and the probe's", n.Load())
				}
			}
		})
	}
}

// Requests that booked their slots before the probe went out, and whose
// slots came while it was out, wait for its answer and then book again:
// they go at the rule's pace, not all at once when the answer comes (a
// burst right after a penalty, when providers punish one the hardest).
func TestRequestsThatWaitedForAProbeKeepThePace(t *testing.T) {
	const waiters = 3
	probeIn, answerProbe := make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	var mu sync.Mutex
	var after []time.Time // arrivals after the probe's
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1: // the penalty (probeSetup)
		case 2: // the probe
			close(probeIn)
			<-answerProbe
		default:
			mu.Lock()
			after = append(after, time.Now())
			mu.Unlock()
		}
		w.Write([]byte(`{"errcode":0}`))
	}}
	// A slot every 500 ms: the probe's comes about 400 ms after the
	// penalty's end, time for the others to book theirs behind it.
	h, c, u := probeSetup(t, rec, 2)
	answer := sync.OnceFunc(func() { close(answerProbe) })
	defer answer()
	waits := make(chan struct{}, waiters)
	throttle.OnProbeWait(t, func() { waits <- struct{}{} })
	errs := make(chan error, waiters+1)
	go func() {
		_, err := get(context.Background(), c, u)
		errs <- err
	}()
	<-h.reserved // the probe's slot, the first
	for range waiters {
		go func() {
			_, err := get(context.Background(), c, u)
			errs <- err
		}()
		<-h.reserved // each books before the probe is out: slots 500 ms apart
	}
	<-probeIn
	for range waiters {
		<-waits // each slot came while the probe was out
	}
	answer()
	for range waiters + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Booked again, 500 ms apart: a request woken late may come near the
	// next, but never three within one slot's time.
	for i := 2; i < len(after); i++ {
		if d := after[i].Sub(after[i-2]); d < 500*time.Millisecond {
			t.Errorf("three requests that waited for the probe arrived within %v: %v", d, after)
			break
		}
	}
}
