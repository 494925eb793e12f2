// Package lark hands throttle's Transport to the Feishu / Lark SDK,
// github.com/larksuite/oapi-sdk-go/v3, through its lark.WithHttpClient
// option; nothing else changes.
//
//	client := lark.NewClient(appID, appSecret, throttle.MustNew(
//		throttle.WithProfiles(feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: appID}}}).Profile()),
//	))
//
// The SDK returns a call's transport error as it is, so errors.Is finds
// throttle.ErrThrottled and throttle.ErrPenalized in it. The provider's own
// answers (a 429 with code 99991400, say) still come back as a response
// whose Code says so, exactly as Feishu sent them.
package lark
