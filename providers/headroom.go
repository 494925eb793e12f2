package providers

import "time"

// Headroom lets the Transport choose a profile's allowance for latency from
// measurement instead of a fixed guess. Providers count arrivals in fixed
// wall-clock windows; sends spread over a rule's Period reach the provider
// spread by the latency too, so a rule that keeps its limit in any window
// of Period+J is safe when the latency varies by at most J. J costs
// throughput (DingTalk's 20/s paced over 1.05 s is 19.05/s), so it should
// be as small as the latency's spread allows and no smaller.
//
// A preset sets Headroom when its config leaves Jitter unset; an explicit
// Jitter always wins. The Transport measures the spread of the time from
// the slot a call was booked for to the answer's headers (a late wake for
// the slot crowds the provider's window as the network does), shares the largest recent estimate of
// the live replicas through Redis so that every replica paces the shared
// rules with one allowance, and, when that allowance moves by a step,
// replaces the profile's Route and Classify with those of Rebuild(allowance).
type Headroom struct {
	// Floor and Ceiling bound the allowance (defaults 5 ms and 150 ms: the
	// ceiling is the largest allowance a preset will choose on its own; a
	// network whose latency varies more than that wants its Jitter set).
	// One given alone moves the other's default to meet it.
	Floor, Ceiling time.Duration
	// Step quantises the allowance (default 2 ms), so that rules are
	// rebuilt only when it moves by a few milliseconds.
	Step time.Duration
	// Margin is added to the measured spread (default 5 ms): the quantiles
	// leave out the tail of the latency, and a replica's timers and
	// scheduler add a few milliseconds of their own to when a send leaves
	// (measured: with the spread alone, a latency varying by 0-10 ms on a
	// loaded 2-core machine was answered with a rejection now and then).
	Margin time.Duration
	// Initial is the allowance until enough answers were measured: the
	// preset's old fixed default, safe for most networks (zero: Ceiling).
	Initial time.Duration
	// Rebuild returns the profile with every window widened by allowance
	// instead of Jitter. It is called off the request path, rarely (the
	// allowance is quantised to Step). The rebuilt profile's Match,
	// DefaultPenalty and MaxPenalty are not used: the original's stay.
	Rebuild func(allowance time.Duration) (Profile, error)
}
