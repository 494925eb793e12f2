// Command dingtalk shows throttle keeping several replicas of a service
// within DingTalk's limits.
//
//	go run ./examples/dingtalk            # offline, against the embedded emulator
//	go run ./examples/dingtalk -naive     # the same load without throttle: quota errors and the IP ban
//	go run ./examples/dingtalk -redis redis://127.0.0.1:6379/0   # share the limits through Redis
//	DINGTALK_APP_KEY=... DINGTALK_APP_SECRET=... go run ./examples/dingtalk -real
//
// Four replicas fire ordinary calls of both API generations (the old
// oapi /topapi/v2/user/get and the new /v1.0/contact/users/{id}) at several
// times the published limit for ten seconds (then the calls in flight
// finish, within callTimeout), each through
// &http.Client{Transport: throttle.MustNew(...)}. The summary is read from the
// OpenTelemetry metrics the Transports recorded, as a dashboard would see
// them, and checked against the emulator's own count of rejected calls.
package main
