// Package dingtalkofficial hands throttle's Transport to DingTalk's official
// SDK, github.com/alibabacloud-go/dingtalk, through an adapter for its
// HttpClient interface.
//
// The SDK's own go.mod declares darabonba-openapi/v2 v2.0.11 and tea v1.2.2,
// where there is no way in: tea builds its own http.Client over
// new(http.Transport). darabonba-openapi/v2 v2.1.13 and later take an
// HttpClient in openapi.Config, so require it in your go.mod:
//
//	go get github.com/alibabacloud-go/darabonba-openapi/v2@v2.1.13
//
// Then give every client of the SDK a Config from this package:
//
//	rt := throttle.MustNew(throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: appKey}}}).Profile()))
//	contacts, err := contact.NewClient(dingtalkofficial.ConfigWithTimeout(rt, 10*time.Second))
//
// The SDK's own ReadTimeout, ConnectTimeout, proxy and TLS settings belong
// to the transport it builds, which the adapter leaves out, and the SDK
// passes no context: ConfigWithTimeout bounds each call instead.
//
// The ...WithOptions calls need a non-nil *util.RuntimeOptions (an empty one
// will do): nil panics in this version. The calls without options pass one.
//
// A client of the SDK is not safe for concurrent use (every call writes its
// Headers field): give each goroutine its own client; they may all share
// one Transport.
//
// The SDK returns a transport error as it is (only its own *SDKError and
// response errors are converted), so errors.Is finds throttle.ErrThrottled
// and throttle.ErrPenalized in it.
package dingtalkofficial
