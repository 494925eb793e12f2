package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// A penalty another replica recorded reaches the profile's Heard as this
// replica stops the scope (here from the shared limiter's refusal); the
// replica whose answer it was is not told of its own.
func TestProfileHearsPenaltiesOfOtherReplicas(t *testing.T) {
	srv := serve(t, &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("quota") != "" {
			w.Header().Set("X-Test-Penalty-Ms", "60000")
			w.Header().Set("X-Test-Processed", "1")
		}
		w.Write([]byte(`{"errcode":0}`))
	}})
	shared := limiter.NewMemory() // both replicas' limiter
	group := limitertest.Group(t)
	type heard struct{ scope, code string }
	replica := func(got *[]heard) *http.Client {
		p := testProfile(group, mustRule(t, 1000, time.Second))
		var mu sync.Mutex
		p.Heard = func(scope, code string, until time.Time) {
			mu.Lock()
			defer mu.Unlock()
			*got = append(*got, heard{scope, code})
		}
		tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLimiter(shared), throttle.WithProfiles(p))
		t.Cleanup(func() { tr.Close() })
		return &http.Client{Transport: tr}
	}
	var byA, byB []heard
	a, b := replica(&byA), replica(&byB)
	if _, err := get(context.Background(), a, srv.URL+"/a?quota=1"); err != nil {
		t.Fatal(err)
	}
	if _, err := get(context.Background(), b, srv.URL+"/a"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("the other replica: %v, want ErrPenalized", err)
	}
	if len(byA) != 0 {
		t.Errorf("the replica whose answer it was heard %v", byA)
	}
	if len(byB) != 1 || byB[0] != (heard{"api:/a", "90018"}) {
		t.Errorf("the other replica heard %v, want the one penalty of api:/a, code 90018", byB)
	}
}
