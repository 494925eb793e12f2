// Package feishutest emulates the rate limits of the Feishu / Lark open
// platform (open.feishu.cn, open.larksuite.com) for tests, examples and
// benchmarks: per-app per-API frequency levels (per-second and per-minute
// caps, HTTP 429 with code 99991400 and the x-ogw-ratelimit-* headers), the
// free edition's monthly tenant quota (429 with 99991403), the IM rule of 5
// messages per second to one chat or user (230020), replies included (the
// emulator remembers each message's chat), Feishu's error bodies, the
// tenant_access_token endpoint, latency jitter, fault injection and a record
// of every request.
//
// Windows are fixed: wall-clock seconds and minutes, and calendar months in
// Asia/Shanghai, all in emulated time. A rejected call is not counted.
package feishutest
