// Package wechat hands throttle's Transport to github.com/silenceper/wechat/v2
// (official account, mini program, WeCom "work"). That SDK takes no client
// per instance: every one of its calls in the process goes through the
// package variable util.DefaultHTTPClient, so the Transport is installed
// once, at start-up, for the whole process.
//
//	wechat.Use(throttle.MustNew(
//		throttle.WithProfiles(wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: appID}}}).Profile()),
//	))
//
// Give that Transport a profile for every app and provider the process
// calls through this SDK (several WithProfiles, or one per provider):
// requests no profile matches pass through untouched.
//
// The SDK returns a transport error as it is (util.HTTPGet and
// util.PostJSON), so errors.Is finds throttle.ErrThrottled and
// throttle.ErrPenalized in it; WeChat's own errors come back as the SDK's
// "errcode=..." errors, as before.
package wechat
