// Package tokens shares the providers' token exchanges between the replicas
// of a service through Redis: one exchange per credential per token
// lifetime for the whole fleet, whatever SDK makes it.
//
// Every SDK fetches its own access token (DingTalk gettoken, WeChat
// /cgi-bin/token and stable_token, WeCom gettoken and the suite's tokens,
// Feishu tenant_access_token) and keeps it in its own process. Replicas
// that each fetch one spend the exchange's own limits and, on WeChat, whose
// /cgi-bin/token issues a new token on every fetch and invalidates the
// previous one, invalidate one another's tokens.
//
// Sharer.Wrap returns a RoundTripper that recognises those exchanges. The
// first replica to ask fetches; the provider's answer is kept in Redis
// encrypted (AES-256-GCM) under keys derived (HKDF-SHA256) from the
// credential the exchange presents (the app secret; the suite secret and
// org; the permanent code) and its path, whichever of the provider's hosts
// it went to (WeChat serves one account from several), so that Redis never
// holds a token in clear and a caller without the secret can neither find
// nor read it. Every other exchange of that credential, on any replica, is
// answered from it: the provider's body as it was sent, with only its
// lifetime member (expires_in, expireIn, expire) counted down to what is
// left, so each SDK caches it for the right time. An answer is kept until
// Margin before its end (default 30 minutes: SDKs subtract up to 25
// minutes of their own, and told less they cache nothing): after that the
// next exchange fetches anew, and an answer stated with no more than the
// margin is passed on as the provider gave it, not kept. Concurrent exchanges of one credential wait for the one in
// flight, polling Redis, bounded by their context; a replica that dies
// while fetching holds the others no longer than a short lease (SET NX PX),
// which a live fetcher renews while the provider takes its time (up to a
// minute), and whose answer's write to Redis has a bound of its own. The
// answer's age is counted from the fetcher's clock on the reader's, a
// reader whose clock is behind reading it as new; what is left is bounded
// by the key's expiry on Redis's clock (Margin before the token's end), so
// no skew tells an SDK more than is left.
//
// Only answers that pass the provider's checks are kept (HTTP 200, a JSON
// body under 16 KiB, the provider's success code, a token of sane form, a
// lifetime of more than Margin, up to a day). WeChat's
// stable_token with force_refresh is never answered from Redis; it takes
// the lease after any fetch in flight, and its answer replaces the one kept.
//
// Healing: when an API answers a token this replica handed out with the
// provider's invalid or expired code (WeChat and WeCom 40001, 42001, 40014,
// WeCom's 40082 and 42009 for a suite's token, invalid or expired, in its
// get_corp_token exchanges; DingTalk 40014 or HTTP 401
// InvalidAuthentication; Feishu 99991663, 99991664 for an app_access_token
// and 99991677), the
// kept answer whose token that was is deleted from Redis, compared on the
// token's keyed hash so that a newer answer another replica stored stays.
// The SDK's next exchange then fetches once for the fleet. Heals of one
// credential are capped for the fleet (WithHealLimits: one in 30 s, 20 a
// day), so that a service outside the fleet that keeps invalidating the
// token cannot turn healing into a storm of fetches.
//
// Replacing: an SDK keeps a token until its own cache lapses, whatever the
// provider answers. Once the provider has refused a token this replica
// handed out, the requests still carrying it are sent with the token the
// fleet keeps now for the same credential, when it keeps another (a copy
// of the request: query access_token or suite_access_token, DingTalk's
// header, a Bearer Authorization); with none kept they go as they came,
// and the kept answer is looked for at most once a second per token.
//
// When Redis fails, each exchange is sent as it came: every replica
// exchanges for itself, as without the package. WeChat's /cgi-bin/token
// is the exception that cannot be left at that: each of its exchanges
// issues a new token and retires the one kept, so its answer, sent alone
// or fetched and not kept, is written for the fleet once Redis answers, in
// place of the kept one unless that one was fetched later (converge.go);
// and its fetch, once sent, goes on for the fleet when its caller gives up,
// the caller answered at once with its context's error.
//
// Sharer.Close ends that background work (the Transport's Close calls it):
// the later write gives up, the fetches that went on are cancelled and
// their leases let go, and Close waits for them within its context, so
// that nothing of the Sharer's outlives it. An exchange made after Close
// is still answered, shared while Redis answers and sent as it came when
// it does not, but with nothing in the background: a rotating fetch ends
// with its caller, and an answer Redis did not take is not written later.
//
// Of an answer that hands out several tokens (Feishu's
// app_access_token/internal: the tenant's and the app's), each is watched.
package tokens
