// Package wecomtest emulates the rate limits of the WeCom server API
// (qyapi.weixin.qq.com) for tests, examples and benchmarks: per company per
// API and per egress IP per API limits by the minute and the hour, each
// answering 45009 "api freq out of limit" and then blocking its dimension for
// as long as the window that tripped; an optional cap on calls in flight per
// company per API (45033); WeCom's error bodies, the gettoken endpoint,
// latency jitter, fault injection and a record of every request.
//
// Windows are fixed: calendar minutes and hours in emulated time. A rejected
// call is not counted.
package wecomtest
