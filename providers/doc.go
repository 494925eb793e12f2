// Package providers holds what the Transport needs to know about an open
// platform: the Profile type (which requests, which rules and penalty scopes,
// how to read an answer), the Route and Verdict a profile returns, and the
// helpers profiles share: body peeking that hands the caller (PeekBody) or
// the server (PeekRequestBody) the original bytes, and penalty-end parsing.
//
// Presets live in sub-packages (dingtalk, wechat, wecom, feishu), each
// routing requests by its provider's API catalog (generated from the
// providers' SDKs by tools/catalog) and each with an emulator of the
// provider's limits in its <name>test package.
package providers
