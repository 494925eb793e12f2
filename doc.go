// Package throttle keeps a service's outbound calls to rate-limited open
// platforms (DingTalk, WeChat, WeCom, Feishu) within the providers' limits,
// across every replica of the service.
//
// A Transport is an http.RoundTripper: hand it to any SDK that accepts an
// *http.Client.
//
//	transport := throttle.MustNew(
//		throttle.WithRedis(rdb), // omit: in-process limiter
//		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "ding..."}}}).Profile()),
//	)
//	defer transport.Close() // on shutdown: background work ends, booked slots go back
//	client := &http.Client{Transport: transport}
//
// For each request that a profile matches, the Transport
//
//   - fails fast with ErrPenalized when the provider penalised one of the
//     request's scopes (seen by any replica), sending nothing;
//   - reserves a slot for every rule of the request in one limiter call (one
//     Redis round trip), and waits for it on a timer when the wait fits the
//     budget (the smaller of WithMaxWait and the context deadline), or fails
//     at once with ErrThrottled when it does not, like
//     golang.org/x/time/rate's Limiter.Wait; a cancelled wait gives its slot
//     back;
//   - sends, then reads the provider's verdict from the answer (peeking at a
//     bounded prefix of the body, which the caller still reads byte for
//     byte); a quota error penalises its scope for every replica until the
//     provider's penalty ends, and the caller gets the provider's answer;
//   - retries what is safe to retry (WithRetry), each attempt taking its own
//     slot;
//   - records OpenTelemetry metrics and spans, never with a credential.
//
// Requests no profile matches pass through untouched.
package throttle
