package circuit

import (
	"errors"
	"fmt"
	"time"
)

// A scope's states, the outcomes a request reports, and the error of an
// open scope.

// State is the state of one scope's breaker.
type State int

// Breaker states.
const (
	// Closed lets every request through. A scope that was never penalised,
	// or whose probe succeeded, is closed and holds no memory.
	Closed State = iota
	// HalfOpen follows the end of a penalty window: one probe at a time may
	// go through to find out whether the provider has lifted the penalty.
	HalfOpen
	// Open refuses every request until the penalty window ends.
	Open
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Outcome is what a request let through by [Set.Allow] reports back.
//
// There is no failure outcome: the only failure that counts is a quota
// verdict, and it carries its own window, so the caller reports it with
// [Set.Penalize] (before calling done, so no other request can slip in as a
// probe between the two).
type Outcome int

const (
	// Ignored says the request tells nothing about the quota: it was
	// cancelled, failed in transport, got a non-quota error, or got a quota
	// verdict already reported through Penalize. A probe that ends Ignored
	// frees the probe slot for the next request. The zero Outcome, so that a
	// forgotten field errs on the side of not closing a breaker.
	Ignored Outcome = iota
	// Success says the provider answered without a quota verdict: a probe
	// that succeeds closes its scope's breaker.
	Success
)

func (o Outcome) String() string {
	switch o {
	case Ignored:
		return "ignored"
	case Success:
		return "success"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// ErrOpen is matched (errors.Is) by every refusal of [Set.Allow].
var ErrOpen = errors.New("circuit: scope is open")

// OpenError is the refusal of [Set.Allow]: the scope is penalised until Until,
// or its window has ended and a probe is already in flight (Probing).
type OpenError struct {
	// Scope is the refusing scope; when several are open, the one whose
	// penalty ends last, so that retrying after Until does not meet another.
	Scope string
	// Until is the end of the scope's penalty window. When Probing, it has
	// passed already and the answer depends on the probe's outcome.
	Until time.Time
	// Code is the provider's error code that opened the scope.
	Code string
	// Probing is true when the window has ended and another request is
	// probing the scope.
	Probing bool
}

func (e *OpenError) Error() string {
	if e.Probing {
		return fmt.Sprintf("circuit: scope %q is half-open and a probe is in flight", e.Scope)
	}
	return fmt.Sprintf("circuit: scope %q is open until %s", e.Scope, e.Until.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }
