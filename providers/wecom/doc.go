// Package wecom is the preset profile for the WeCom (企业微信) server API
// at qyapi.weixin.qq.com.
//
// WeCom limits each API per company (not per app: the apps of one company
// share its budget, hence App.CorpID) and per egress IP, by the minute and
// by the hour. Any of them answers 45009 "api freq out of limit" without
// saying which, and then blocks for as long as the window that tripped: a
// minute, an hour, the day. The profile therefore keeps every API within all
// four limits (sliding windows) and, on a 45009, penalises that API of the company for at least
// a minute, escalating to an hour and then the rest of the day when the error
// comes back right after a penalty ends.
//
// A request's API is its path's template in WeCom's API catalog (generated
// from the SDKs, catalog_gen.go) or one of Config.APIs; a path in neither is
// counted as one stand-in API, "uncatalogued".
package wecom
