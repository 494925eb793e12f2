// Package dingtalktest emulates DingTalk's rate limits in an
// httptest.Server: per-app, per-API calls per fixed wall-clock second, the
// per-IP limit with its ban, the monthly quota of metered APIs, with the
// platform's exact error bodies for both API generations, jittered latency,
// a configurable clock, fault injection and a record of every request.
//
// It serves both generations on one host: paths under /v1.0/ (and /v2.0/)
// answer like api.dingtalk.com, the rest like oapi.dingtalk.com.
package dingtalktest
