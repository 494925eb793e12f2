// Package providers is what a profile author needs to teach the Transport
// an open platform's limits: the Profile type, the Route a profile gives
// each request and the Verdict it gives each answer.
//
// A Profile does three things, each with its helpers here:
//
//   - Match picks the provider's requests: MatchHosts builds one from host
//     names.
//   - Route names the request's API, the rules it is charged to and the
//     penalty scopes ("kind:id") it belongs to. FoldPath turns a path into
//     a low-cardinality API name for a provider that publishes no catalog;
//     PeekRequestBody reads a bounded prefix of the body when a limit is
//     named there (a chat, a user), leaving the body as it was.
//   - Classify reads the answer into a Verdict of a Kind. PeekBody reads
//     the error body without taking it from the caller, ParseRetryAfter
//     reads a Retry-After header, and Route.Scope finds the route's scope a
//     Quota verdict penalises.
//
// The Profile example is a complete profile for a JSON API that answers 429
// with Retry-After. Presets for DingTalk, WeChat, WeCom and Feishu live in
// sub-packages, each routing requests by its provider's API catalog and
// each with an emulator of the provider's limits in its <name>test package;
// each serves several apps at once (Config.Apps), told apart by package apps.
package providers
