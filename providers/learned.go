package providers

import "time"

// Learned is a limit the provider stated in an answer, lower than the one
// the profile's table holds for an API: Feishu's x-ogw-ratelimit-limit on a
// 99991400. A Classify returns it in Verdict.Learned; the Transport applies
// it at once through Profile.Lower, stores it in Redis until Until, and
// every replica's Transport applies the stored ones through its own
// Profile.Lower, so the API's rule is lowered for the whole fleet.
type Learned struct {
	// API is the Route.API whose rule is lowered.
	API string
	// Window names the rule of the API lowered, in the profile's own terms
	// (Feishu: "s" per second, "m" per minute). At most 8 bytes.
	Window string
	// Limit is the provider's stated limit for the window. A profile never
	// lets it raise a limit above its table or config.
	Limit int
	// Until is when the learned limit lapses and the table's applies again.
	Until time.Time
}
