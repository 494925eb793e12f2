// Package apps learns which app, and for a third-party (ISV) app which
// customer organisation, each access token belongs to, so that a Transport
// serving several apps charges every request to its own app's limits
// without the caller's help.
//
// Every SDK fetches its tokens through the client it calls the APIs with.
// A Book wraps the Transport's base transport (Observe) and reads each token
// exchange that passes: the request names the app (DingTalk gettoken?appkey=,
// POST /v1.0/oauth2/accessToken, the ISV corpAccessToken and
// service/get_corp_token; WeChat /cgi-bin/token and /cgi-bin/stable_token;
// WeCom /cgi-bin/gettoken and the third-party service/get_corp_token;
// Feishu tenant_access_token and app_access_token), the answer carries the
// token and its lifetime. Later requests carrying that token (query
// access_token, header x-acs-dingtalk-access-token, Authorization: Bearer)
// are tagged with the app (NewContext) before the preset routes them
// (Resolve).
//
// What one replica learns, the others read from Redis (Config.Redis), under a
// keyed hash of the token (HMAC-SHA256 with a key every replica shares,
// truncated to 128 bits) that expires with the token: neither a token nor a
// secret is ever written to Redis, a metric, a span or a log line. Each
// replica caches what it learned or read in memory with its expiry, so the
// common request costs one HMAC and a map lookup and no Redis call; a token
// Redis does not know is remembered as unknown for a short while
// (Config.NegativeTTL) so that it costs at most one Redis call per replica per
// while.
//
// A token the Book does not know leaves the request untagged and is counted
// (Stats.Unknown, metric throttle.apps.unknown); the preset then charges it
// to its configured default app or to its conservative shared scope (see
// each preset's Config.Default and Config.Unknown). A caller that knows
// better tags the request itself (throttle.ContextWithApp), which wins over
// learning.
//
// Use a Book through throttle.WithApps; use it directly (Learn, Lookup) only
// for tokens fetched outside the Transport.
package apps
