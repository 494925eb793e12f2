// Package wechat is the preset profile for the WeChat Official Account and
// Mini Program server API (api.weixin.qq.com and its regional hosts).
//
// WeChat counts quotas per account (AppID) per API path: a daily quota per
// calendar day in Beijing (45009 once used up, until midnight) and, on some
// APIs, a per-minute limit (45011, or 44991 on Mini Program APIs, "retry next
// minute"). The access token does not reveal the AppID, so it comes from
// the App the Transport attached to the request (learned from the token
// exchange, or given with throttle.ContextWithApp); Config.Apps lists the
// accounts, each with its own quotas.
//
// A request's API is its path's template in WeChat's API catalog (generated
// from the SDKs, catalog_gen.go), or a path listed in App.Daily or
// App.PerMinute; a path in neither is counted as one stand-in API,
// "uncatalogued". Only the APIs listed in App.Daily and App.PerMinute
// get rules; every API gets a penalty scope, so a quota error on any API
// stops further calls to it until the window that tripped has passed.
package wechat
