package providers

import "time"

// Learned is a limit the provider stated in an answer, lower than the one
// the profile's table holds for an API: Feishu's x-ogw-ratelimit-limit on a
// 99991400. A Classify returns it in Verdict.Learned; the Transport applies
// it at once through Profile.Lower, stores it in Redis until Until, and
// every replica's Transport applies the stored ones through its own
// Profile.Lower, so the API's rule is lowered for the whole fleet.
//
// A reading of the provider's quota endpoint (QuotaCheck) travels the same
// way, with App set: the provider is the authority on that app's quota, so
// such a limit may raise the rule as well as lower it.
type Learned struct {
	// API is the Route.API whose rule is lowered.
	API string
	// App, when set, is the one app whose rule the limit is (a quota
	// endpoint's reading, e.g. WeChat's per-AppID daily quotas); empty:
	// every app of the profile (Feishu: an API's level is the same for all).
	App string
	// Window names the rule of the API lowered, in the profile's own terms
	// (Feishu: "s" per second, "m" per minute). At most 8 bytes.
	Window string
	// Limit is the provider's stated limit for the window. A profile never
	// lets it raise a limit above its table or config.
	Limit int
	// Until is when the learned limit lapses and the table's applies again.
	Until time.Time
}
