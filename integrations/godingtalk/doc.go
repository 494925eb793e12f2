// Package godingtalk hands throttle's Transport to github.com/hugozhu/godingtalk,
// whose client sends every call through its exported HTTPClient field.
//
//	c := godingtalk.NewClient(corpID, corpSecret, throttle.MustNew(
//		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: corpID}}}).Profile()),
//	))
//	err := c.RefreshAccessToken(true) // the legacy gettoken?corpid=&corpsecret= form
//
// godingtalk reads a token's lifetime as expires_in | 7200 (a bitwise or),
// so the counted-down lifetime of a token shared across replicas reads as
// two hours or more, and a replica that took the token late keeps it past
// its end. With Redis, give its Transport throttle.WithoutSharedTokens():
// DingTalk's repeated exchanges return the same token, so nothing is lost
// but the shared count of exchanges.
//
// A call refused before it was sent returns an error that matches
// throttle.ErrThrottled or throttle.ErrPenalized with errors.Is: the SDK
// returns the *url.Error of net/http unchanged.
package godingtalk
