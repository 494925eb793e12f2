// Package defaulttransport covers the SDKs that take no HTTP client at all
// and send through net/http's defaults: github.com/zhaoyunxing92/dingtalk/v2
// (its client is an unexported &http.Client{} over http.DefaultTransport),
// github.com/royeo/dingrobot (http.Post) and the token fetch of
// github.com/fastwego/dingding (http.DefaultClient). For them the Transport
// is installed once, at start-up, as the process's default transport:
//
//	http.DefaultTransport = throttle.MustNew(
//		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}).Profile()),
//	)
//
// This is safe: New takes http.DefaultTransport as its base
// transport when it is called, before the assignment, so the Transport
// sends through the previous default and never through itself. Requests to
// hosts no profile matches pass through to that previous default untouched,
// so the rest of the process (and every library in it) is unaffected apart
// from one map lookup per request. Install it before the first request:
// http.DefaultTransport is a plain variable, read without synchronisation.
//
// These SDKs return net/http's *url.Error as it is (or wrap it with %w), so
// errors.Is finds throttle.ErrThrottled and throttle.ErrPenalized in their
// errors.
//
// The package holds no code: the tests are the recipe, run against the
// DingTalk emulator through each real SDK.
package defaulttransport
