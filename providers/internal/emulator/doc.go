// Package emulator holds the plumbing that the provider emulators
// (wechattest, wecomtest, feishutest and, in part, dingtalktest) share, so
// that each of them is left with what is its provider's own: which limits
// it counts, how it counts them and the bodies it answers with.
//
// The shared part is everything around that: the emulated clock
// (origin + (Clock() - origin) × TimeScale), the latency jitter a request
// waits before it is counted, access tokens with a lifetime, the queue of
// injected faults, the record of every request and the counters by code.
// An emulator keeps a Core as an unexported field, not embedded, so that
// none of these methods becomes part of its exported API; it takes Core's
// lock around its own counting state as well.
package emulator
