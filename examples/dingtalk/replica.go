package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// replica is one simulated instance of the service.
type replica struct {
	id     int
	client *http.Client
	meter  *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader

	// Live counts for the progress line (and the whole summary with -naive,
	// where no Transport records metrics).
	sent, ok, refused, quota, failed atomic.Int64
}

// tally is one row of the summary.
type tally struct {
	sent, ok, waited, refused, quota, failed int64
	waitSum                                  float64
}

func (t *tally) add(o tally) {
	t.sent += o.sent
	t.ok += o.ok
	t.waited += o.waited
	t.refused += o.refused
	t.quota += o.quota
	t.failed += o.failed
	t.waitSum += o.waitSum
}

func (r *replica) live() tally {
	return tally{sent: r.sent.Load(), ok: r.ok.Load(), refused: r.refused.Load(), quota: r.quota.Load(), failed: r.failed.Load()}
}

// fire calls path at rate calls per second on average until ctx ends, each
// call on its own goroutine as a busy service would, then waits for the
// calls in flight. Arrivals are random (Poisson), as a service's are.
func (r *replica) fire(ctx context.Context, tg *target, path string, rate float64) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	// One WaitGroup per stream: a replica runs several, and Add must not
	// race with another stream's Wait.
	var inFlight sync.WaitGroup
	for {
		select {
		case <-ctx.Done():
			inFlight.Wait()
			return
		case <-timer.C:
			timer.Reset(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				r.call(tg, path)
			}()
		}
	}
}

// callTimeout bounds one call, its wait for a slot included.
const callTimeout = 3 * time.Second

func (r *replica) call(tg *target, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var req *http.Request
	if strings.HasPrefix(path, "/v1.0/") {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, tg.base+path, nil)
		req.Header.Set("x-acs-dingtalk-access-token", tg.token)
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, tg.base+path+"?access_token="+tg.token,
			strings.NewReader(`{"userid":"manager4220","dept_id":1}`))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	switch {
	case errors.Is(err, throttle.ErrThrottled), errors.Is(err, throttle.ErrPenalized):
		r.refused.Add(1)
		return
	case err != nil:
		r.failed.Add(1)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r.sent.Add(1)
	if isQuotaAnswer(resp.StatusCode, body) {
		r.quota.Add(1)
	} else if resp.StatusCode == http.StatusOK && !strings.Contains(string(body), `"errcode":`) || strings.Contains(string(body), `"errcode":0`) {
		r.ok.Add(1)
	} else {
		r.failed.Add(1)
	}
}

// isQuotaAnswer spots DingTalk's limit answers as a caller would, without
// the library: the old API's 90018 (plain or wrapped in errcode 88), the new
// API's QpsLimit codes, and the IP ban. Codes are matched as the JSON
// writes them: a bare "90018" also turns up in a success's random
// request_id, about once in a thousand runs.
func isQuotaAnswer(status int, body []byte) bool {
	s := string(body)
	return strings.Contains(s, `"errcode":90018`) || strings.Contains(s, `"sub_code":"90018"`) ||
		strings.Contains(s, `"code":"Forbidden.AccessDenied.QpsLimit`) || strings.Contains(s, `"code":"Forbidden.AccessDenied.QpmLimit`) ||
		strings.Contains(s, `"punish"`) || strings.Contains(s, "<html") || status == 1111
}

// fromMetrics reads the replica's row from what its Transport recorded.
func (r *replica) fromMetrics() (tally, []metricdata.Metrics, error) {
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		return tally{}, nil, err
	}
	var t tally
	var all []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			all = append(all, m)
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != "throttle.requests" {
					continue
				}
				for _, dp := range data.DataPoints {
					outcome, _ := dp.Attributes.Value(attribute.Key("outcome"))
					switch outcome.AsString() {
					case "admitted":
						t.sent += dp.Value
						t.ok += dp.Value
					case "waited":
						t.sent += dp.Value
						t.ok += dp.Value
						t.waited += dp.Value
					case "throttled", "penalized":
						t.refused += dp.Value
					case "quota_error":
						t.sent += dp.Value
						t.quota += dp.Value
					case "transient_error", "fatal_error":
						t.sent += dp.Value
						t.failed += dp.Value
					default:
						t.failed += dp.Value
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "throttle.wait.duration" {
					for _, dp := range data.DataPoints {
						t.waitSum += dp.Sum
					}
				}
			}
		}
	}
	return t, all, nil
}

func summarize(out io.Writer, o options, tg *target, replicas []*replica, start time.Time, elapsed time.Duration, limit float64) error {
	var total tally
	rows := make([]tally, len(replicas))
	for i, r := range replicas {
		rows[i] = r.live()
		if !o.naive {
			var all []metricdata.Metrics
			var err error
			rows[i], all, err = r.fromMetrics()
			if err != nil {
				return err
			}
			if o.dumpMetrics {
				dump(out, r.id, all)
			}
		}
		total.add(rows[i])
	}

	run := "With throttle"
	if o.naive {
		run = "Without throttle (-naive)"
	}
	fmt.Fprintf(out, "\n%s, in %.1fs (%v of calls, then %.1fs for the calls in flight):\n",
		run, elapsed.Seconds(), o.duration, (elapsed - o.duration).Seconds())
	if tg.emu != nil {
		// What the provider did comes first: it is what a service pays for.
		st := tg.emu.Stats()
		fmt.Fprintf(out, "  the provider rejected %d calls for exceeding a limit and banned the IP %s", st.Rejected, times(st.Bans))
		if first, ok := firstBan(tg.emu.Requests()); ok {
			lockedFrom := max(first.Sub(start), 0)
			fmt.Fprintf(out, ": every API of the app was locked out from %.1fs on, %.1fs of this run, and for %v after the ban began",
				lockedFrom.Seconds(), (elapsed - lockedFrom).Seconds(), 5*time.Minute)
		}
		fmt.Fprintln(out, ".")
		// Every quota answer the callers saw is one the emulator gave: a
		// rejection by a limit, or an answer during the ban.
		fmt.Fprintf(out, "  the callers saw %d quota answers = %d rejected by a limit + %d answered during a ban", total.quota, st.Rejected, st.BannedAnswers)
		if total.quota != int64(st.Rejected+st.BannedAnswers) {
			fmt.Fprintf(out, " (these differ by %d: calls that timed out before their answer was read)", int64(st.Rejected+st.BannedAnswers)-total.quota)
		}
		fmt.Fprintf(out, "; the provider saw %d calls in all.\n", st.Requests)
	}
	if !o.naive {
		fmt.Fprintf(out, "  %d calls were refused locally, before sending: errors.Is(err, throttle.ErrThrottled) (no slot within the\n"+
			"  wait budget) or throttle.ErrPenalized (a scope the provider penalised); the provider never saw them.\n", total.refused)
	}

	source := "from the OpenTelemetry metrics the Transports recorded"
	if o.naive {
		source = "counted by the callers (no Transport, no metrics)"
	}
	fmt.Fprintf(out, "\nPer replica, %s:\n\n", source)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replica\tsent\tsucceeded\twaited\tavg wait\trefused locally\tquota errors\tother errors\tachieved per API\tof the limit\t")
	for i, r := range replicas {
		writeRow(tw, fmt.Sprint(r.id), rows[i], elapsed, limit)
	}
	writeRow(tw, "total", total, elapsed, limit)
	tw.Flush()
	fmt.Fprintf(out, "\n(2 APIs; published limit %v/s per app and API; \"achieved per API\" counts succeeded calls over the %.1fs)\n",
		limit, elapsed.Seconds())
	if tg.emu != nil {
		st := tg.emu.Stats()
		// With the default headroom a rejection is a failure; with another
		// one it is what the run measures.
		defaultHeadroom := o.headroom == 0 || o.headroom == 50*time.Millisecond
		if !o.naive && defaultHeadroom && (st.Rejected > 0 || st.Bans > 0 || total.quota > 0) {
			return fmt.Errorf("%d calls rejected by the emulator, %d bans and %d quota errors with throttle on", st.Rejected, st.Bans, total.quota)
		}
	}
	return nil
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// firstBan is when the emulator first answered with the IP ban.
func firstBan(recs []dingtalktest.Record) (time.Time, bool) {
	for _, r := range recs {
		if r.Code == "ip-ban" {
			return r.At, true
		}
	}
	return time.Time{}, false
}

func writeRow(tw io.Writer, name string, t tally, elapsed time.Duration, limit float64) {
	perAPI := float64(t.ok) / 2 / elapsed.Seconds()
	avgWait := "-"
	if t.waited > 0 {
		avgWait = fmt.Sprintf("%.0fms", 1000*t.waitSum/float64(t.waited))
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%.1f/s\t%.0f%%\t\n", name, t.sent, t.ok, t.waited, avgWait,
		t.refused, t.quota, t.failed, perAPI, 100*perAPI/limit)
}

func dump(out io.Writer, id int, all []metricdata.Metrics) {
	fmt.Fprintf(out, "metrics of replica %d:\n", id)
	for _, m := range all {
		fmt.Fprintf(out, "  %s (%s): ", m.Name, m.Unit)
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				fmt.Fprintf(out, "%v=%d ", dp.Attributes.ToSlice(), dp.Value)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range data.DataPoints {
				fmt.Fprintf(out, "%d ", dp.Value)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				fmt.Fprintf(out, "count=%d sum=%.3f ", dp.Count, dp.Sum)
			}
		}
		fmt.Fprintln(out)
	}
}
