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

import (
	"net/http"

	sdk "github.com/xen0n/go-workwx"
)

// New returns a WeCom client of the company corpID whose calls go through
// rt, with any further options of the SDK.
func New(corpID string, rt http.RoundTripper, opts ...sdk.CtorOption) *sdk.Workwx {
	return sdk.New(corpID, append(opts, sdk.WithHTTPClient(&http.Client{Transport: rt}))...)
}
