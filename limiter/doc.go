// Package limiter decides when an outbound request may be sent, so that a
// provider's limits hold across every replica of a service.
//
// A [rule.Rule] (package rule) states one limit: at most Limit requests in
// any window of length Period, spread evenly ([rule.New], GCRA: for
// per-second limits counted in wall-clock seconds) or letting a burst through
// while the window has room ([rule.NewWindow], a sliding log: for minute,
// hour, robot and chat limits), at most Limit in each calendar minute, hour,
// day or month of a location ([rule.NewCalendar]), or at most Limit in
// flight ([rule.NewConcurrency]). A [Limiter] checks every rule of a request and every
// shared penalty it names in one step, all or none, and either admits now,
// books a slot ahead when the wait fits the caller's budget, or refuses with
// the exact retry-after. Its answer is a [Reservation], in the style of
// golang.org/x/time/rate: OK, Delay, a blocking Wait, and Cancel to give
// back a slot that will not be used (CancelCalendar for a day's or a
// month's slot alone, of a call the provider refused without billing it).
//
// [Shared] is what a fleet uses: the state lives in Redis (at most one Lua
// script call per request, time from Redis, integer microseconds, all keys
// under one hash tag per group so it runs on Redis Cluster), with what it
// takes to rely on it (a local share of each rule while Redis is away,
// returning once it has answered for a while; penalty announcements
// confirmed against Redis; lost state and corrupt keys noticed and healed),
// built by one call to [NewShared] and stopped by Close. Requests of one
// replica and one group that arrive while a call for the group is in
// flight share the next call, whatever their rules, each with its own
// answer; under load a replica thus needs fewer calls than requests
// (SharedConfig.NoCoalescing turns this off). [Memory] keeps the same contract in one process. Package limitertest
// holds the conformance suite both pass, and any Limiter implemented
// elsewhere (answering with [Admit] and [Refuse]) can run.
package limiter
