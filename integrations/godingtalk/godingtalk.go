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

import (
	"net/http"
	"time"

	sdk "github.com/hugozhu/godingtalk"
)

// NewClient returns a godingtalk client whose calls go through rt, with its
// access token cached in memory (the SDK's default, a file in the working
// directory, does not suit several replicas).
func NewClient(corpID, corpSecret string, rt http.RoundTripper) *sdk.DingTalkClient {
	c := sdk.NewDingTalkClient(corpID, corpSecret)
	c.HTTPClient = &http.Client{Transport: rt, Timeout: 30 * time.Second}
	c.Cache = sdk.NewInMemoryCache()
	return c
}
