package feishu_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

// The preset's table puts an API one level too high (level 8, 20/s) while
// Feishu holds it at level 7 (10/s). Four replicas at five times the
// table's rate: the first 99991400 states the true limit in
// x-ogw-ratelimit-limit, every replica lowers the API's rule to it, and
// nothing is refused after the calls already on the wire when that answer
// came (those within the penalty's one second); the API then gets at least
// 90% of its true rate.
func TestAcceptanceFeishuLearnsALowerLevel(t *testing.T) {
	loadtest.Alone(t)
	const api, tableLevel, trueLevel = "GET /open-apis/contact/v3/users/:user_id", 8, 7
	f := newAccFleet(t, feishu.Config{Apps: []feishu.App{{APIs: map[string]int{api: tableLevel}}}}, feishutest.Options{APIs: map[string]int{api: trueLevel}})
	trueRate := float64(feishu.LevelTable()[trueLevel].PerSecond)
	run := loadtest.Fire(accReplicas, accRun, []float64{accDemand * publishedPerSecond[tableLevel]}, func(ctx context.Context, i, _ int) loadtest.Result {
		return f.call(ctx, i, 0)
	})
	tl := loadtest.Count(run.Results, isQuotaCode)
	t.Logf("callers: %v", tl)

	var refused []time.Time
	var ok []loadtest.Arrival
	for _, r := range f.emu.Requests() {
		switch {
		case r.Path != api:
		case r.Code == feishutest.CodeFrequency:
			refused = append(refused, r.At)
		case r.Code == 0 && r.Status == http.StatusOK:
			ok = append(ok, loadtest.Arrival{At: r.At, Emulated: r.Emulated})
		}
	}
	slices.SortFunc(refused, time.Time.Compare)
	if len(refused) == 0 {
		t.Fatal("the emulator refused nothing: the table was not too high, the test proves nothing")
	}
	first := refused[0]
	for _, at := range refused[1:] {
		if at.Sub(first) > time.Second {
			t.Errorf("refused again %v after the first 99991400 (%d refusals in all), want none after its second",
				at.Sub(first).Round(time.Millisecond), len(refused))
			break
		}
	}
	t.Logf("%d refusals, all within %v of the first", len(refused), refused[len(refused)-1].Sub(first).Round(time.Millisecond))
	// The share after the penalty of the first refusal, at the true rate.
	var after []loadtest.Arrival
	for _, a := range ok {
		if a.At.After(first.Add(2 * time.Second)) {
			after = append(after, a)
		}
	}
	if len(after) > 1 {
		span := after[len(after)-1].At.Sub(after[0].At).Seconds()
		rate := float64(len(after)-1) / span
		t.Logf("after the first refusal: %.2f/s = %.1f%% of the true %.0f/s", rate, 100*rate/trueRate, trueRate)
		if rate < loadtest.MinShare*trueRate || rate > trueRate*1.02 {
			t.Errorf("after the first refusal: %.2f/s, want within [%.0f%%, 102%%] of %.0f/s", rate, 100*loadtest.MinShare, trueRate)
		}
	}
}
