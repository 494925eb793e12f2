// Package workwx hands throttle's Transport to the WeCom SDK
// github.com/xen0n/go-workwx through its workwx.WithHTTPClient option;
// nothing else changes.
//
//	app := workwx.New(corpID, throttle.MustNew(
//		throttle.WithProfiles(wecom.MustNew(wecom.Config{Apps: []wecom.App{{CorpID: corpID}}}).Profile()),
//	)).WithApp(corpSecret, agentID)
//
// The SDK wraps a transport error with %w ("go-workwx: failed to perform
// request: ..."), so errors.Is finds throttle.ErrThrottled and
// throttle.ErrPenalized in it. WeCom's own errors (45009 and the rest) come
// back as the SDK's *workwx.WorkwxClientError, as before.
package workwx
