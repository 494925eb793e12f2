package wechat

import (
	"net/http"
	"slices"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// peekLimit bounds how much of a body Classify reads: WeChat's error bodies
// are under 200 bytes and put errcode first, so a success body (a user list,
// a media file's JSON) is never buffered whole.
const peekLimit = 4 << 10

// maxMessage bounds Verdict.Message, which ends up in errors and logs.
const maxMessage = 256

// Codes Classify acts on.
const (
	codeBusy          = "-1"
	codeDailyQuota    = "45009"
	codeMinuteQuota   = "45011"
	codeMiniFrequency = "44991"
)

// fatalCodes are errors no retry mends: a token to refresh, an API the
// account may not call, a caller IP not on the allow-list.
var fatalCodes = map[string]bool{
	"40001": true, // invalid credential: the token is not the latest
	"42001": true, // access_token expired
	"40014": true, // invalid access_token
	"41001": true, // access_token missing
	"48001": true, // api unauthorized
	"40164": true, // caller IP not on the allow-list
}

func (p *preset) classify(req *http.Request, resp *http.Response, route *providers.Route) providers.Verdict {
	v := p.classifyCode(req, resp, route)
	if resp.StatusCode >= 500 && v.Kind != providers.Quota {
		// A gateway's 5xx, or an error code the status already says to
		// try again: a quota code in the body still comes first, since
		// the status of an error answer is not documented.
		v = providers.Verdict{Kind: providers.Transient, Code: http.StatusText(resp.StatusCode)}
		if d, ok := providers.ParseRetryAfter(resp.Header, p.cfg.Clock()); ok {
			v.RetryAfter = d
		}
	}
	return v
}

// classifyCode reads the answer's errcode.
func (p *preset) classifyCode(req *http.Request, resp *http.Response, route *providers.Route) providers.Verdict {
	prefix, _ := providers.PeekBody(resp, peekLimit)
	code, msg, ok := jsoncode.Numeric(prefix, "errcode", "errmsg", maxMessage)
	if !ok || code == "0" {
		v := providers.Verdict{Kind: providers.OK}
		if ok && isReset(route.API) {
			v.Cleared = p.cleared(req, route)
		}
		return v
	}
	v := providers.Verdict{Code: code, Message: msg}
	switch code {
	case codeDailyQuota:
		// The daily quota resets at midnight Beijing time, or on a reset
		// (clear.go): calling earlier only fails.
		now := p.cfg.Clock()
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = route.Scope(scopekind.API)
		if forced := p.apiScope(forcedRoute); slices.Contains(route.Scopes, forced) {
			v.Scope = forced // the day's forced refreshes, not the exchange's quota
		}
		v.Until = penaltytime.DayEnd(now, p.cfg.DayGrace)
	case codeMinuteQuota, codeMiniFrequency:
		// "retry next minute": WeChat counts calendar minutes.
		now := p.cfg.Clock()
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = route.Scope(scopekind.API)
		v.Until = penaltytime.NextMinute(now)
	case codeClearLimit:
		if !isReset(route.API) || !p.resetsThisAccount(req, route.API) {
			break // not this account's reset: the caller's business
		}
		// The month's resets are used up: another only fails until the
		// 1st.
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = route.Scope(scopekind.API)
		v.Until = penaltytime.MonthEnd(p.cfg.Clock(), p.cfg.DayGrace)
	case codeBusy:
		v.Kind, v.NotProcessed = providers.Transient, true
	default:
		if fatalCodes[code] {
			v.Kind = providers.Fatal
		}
		// Any other errcode is the caller's business, not a limit.
	}
	return v
}
