// Package providers holds what the Transport needs to know about an open
// platform: the Profile type (which requests, which rules and penalty scopes,
// how to read an answer), the Verdict a profile returns, and the helpers the
// presets share: body peeking that hands the caller the original bytes,
// penalty-end parsing and API path folding.
//
// Presets live in sub-packages (dingtalk, wechat, wecom, feishu), each with an
// emulator of the provider's limits in its <name>test package.
package providers
