package circuit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/quotaware/throttle/internal/circuit"
)

// The per-request flow of a transport: ask before sending, report a quota
// verdict with its window through Penalize, then call done.
func Example() {
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	breakers, err := circuit.New(circuit.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	scopes := []string{"api:ding1:/v1.0/users", "app:ding1"}

	send := func(quotaUntil time.Time) {
		done, err := breakers.Allow(scopes)
		var open *circuit.OpenError
		if errors.As(err, &open) {
			fmt.Printf("refused without I/O: %s until %s (code %s)\n", open.Scope, open.Until.Format(time.TimeOnly), open.Code)
			return
		}
		if !quotaUntil.IsZero() { // the provider answered "quota exceeded"
			breakers.Penalize("app:ding1", quotaUntil, "88")
			done(circuit.Ignored)
			fmt.Println("quota verdict")
			return
		}
		done(circuit.Success)
		fmt.Println("sent")
	}

	send(now.Add(time.Minute)) // penalised for a minute
	send(time.Time{})          // refused
	now = now.Add(time.Minute)
	send(time.Time{}) // the probe succeeds
	send(time.Time{}) // traffic resumes
	// Output:
	// quota verdict
	// refused without I/O: app:ding1 until 09:01:00 (code 88)
	// sent
	// sent
}
