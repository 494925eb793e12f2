// Package wechattest emulates the rate limits of the WeChat Official Account
// and Mini Program API (api.weixin.qq.com) for tests, examples and
// benchmarks: per-AppID per-API daily quotas (45009 until midnight Beijing
// time) and per-minute limits (45011, or 44991 on some Mini Program APIs),
// with WeChat's own error bodies, an access-token endpoint, latency jitter,
// fault injection and a record of every request.
//
// Counting follows what WeChat documents and what its errors imply: a daily
// quota counts the calendar day in Asia/Shanghai, a per-minute limit counts
// calendar minutes ("retry next minute"), and a rejected call is not counted.
package wechattest
