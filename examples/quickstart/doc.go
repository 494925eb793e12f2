// Command quickstart calls a DingTalk API 30 times as fast as it can through
// throttle, which keeps the calls within the app's limit (20 a second per
// API): none is rejected by DingTalk.
//
//	go run ./examples/quickstart -emulator                  # offline, against an in-process DingTalk emulator
//	go run ./examples/quickstart -emulator -redis localhost:6379   # limits shared by every replica through Redis
//	DINGTALK_ACCESS_TOKEN=... go run ./examples/quickstart -appkey ding...   # the real DingTalk
package main
