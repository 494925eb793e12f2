// Package godingtalk hands throttle's Transport to github.com/hugozhu/godingtalk,
// whose client sends every call through its exported HTTPClient field.
//
//	c := godingtalk.NewClient(corpID, corpSecret, throttle.MustNew(
//		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: corpID}}}).Profile()),
//	))
//	err := c.RefreshAccessToken(true) // the legacy gettoken?corpid=&corpsecret= form
//
// A call refused before it was sent returns an error that matches
// throttle.ErrThrottled or throttle.ErrPenalized with errors.Is: the SDK
// returns the *url.Error of net/http unchanged.
package godingtalk
