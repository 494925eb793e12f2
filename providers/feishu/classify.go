package feishu

import (
	"cmp"
	"net/http"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// peekLimit bounds how much of a body Classify reads: Feishu's error bodies
// are under 200 bytes with code first, and success bodies can be large.
const peekLimit = 4 << 10

// maxMessage bounds Verdict.Message, which ends up in errors and logs.
const maxMessage = 256

// Codes Classify acts on.
const (
	codeFrequency    = "99991400"
	codeMonthlyQuota = "99991403"
	codeChat         = "230020"
)

// rateCodes are the other rate-limit codes Feishu documents, answered on
// 200, 400 or 429 by individual services (IM, docs, bitable, ...). None
// says how long; they are per-second limits in practice.
var rateCodes = map[string]bool{
	"1000004": true, "1000005": true,
	"190004": true, "190005": true, "190010": true,
	"11232": true, "11233": true,
	"230020": true, "232019": true,
	"1254290": true, "1310217": true,
}

// fatalCodes are errors no retry mends: a missing, invalid or expired
// token, or an app without the permission.
var fatalCodes = map[string]bool{
	"99991661": true, // missing access token
	"99991663": true, // invalid access token
	"99991668": true, // invalid user access token
	"99991677": true, // token expired
	"99991672": true, // app lacks the permission (scope) for this API
	"99991679": true, // user has not granted the permission
}

func (p *preset) classify(req *http.Request, resp *http.Response, route *providers.Route) providers.Verdict {
	limit := peekLimit
	learns := !p.cfg.NoPerChat && resp.StatusCode == http.StatusOK && learnsMessages(route.API)
	if learns {
		limit = answerPeekLimit
	}
	prefix, _ := providers.PeekBody(resp, limit)
	code, msg, ok := jsoncode.Numeric(prefix, "code", "msg", maxMessage)
	if ok && code == "0" {
		if learns {
			p.learn(req, route, prefix)
		}
		return providers.Verdict{Kind: providers.OK}
	}
	now := p.cfg.Clock()
	v := providers.Verdict{Code: code, Message: msg}
	switch {
	case code == codeFrequency:
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = route.Scope(scopekind.API)
		// Without the reset header: the next second, or the next minute
		// for a level with a per-minute cap alone (levels 1-3), whose
		// minute is full (a second would only collect another 99991400).
		fallback := penaltytime.NextSecond(now)
		if minuteCapOnly(route) {
			fallback = penaltytime.NextMinute(now)
		}
		v.Until = p.resetOr(resp.Header, now, fallback)
		v.Learned = p.learnedFrom(resp.Header, route.API, now)
	case code == codeMonthlyQuota && resp.StatusCode >= http.StatusBadRequest:
		// The tenant's monthly quota: every API of the tenant's apps is
		// refused until the 1st, whatever the 429 seems to promise (of
		// this app alone when it is not marked FreeEdition: its routes
		// name no tenant). Feishu answers it with a 429: a success
		// carrying the code is data (a user's file), and stopping the
		// app for the month on its word would be a gift to whoever sent
		// it.
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = cmp.Or(p.monthScope, p.appScope)
		v.Until = penaltytime.MonthEnd(now, p.cfg.MonthGrace)
	case rateCodes[code]:
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = route.Scope(scopekind.API)
		if chat := route.Scope(scopekind.Entity); code == codeChat && chat != "" {
			v.Scope = chat // too many to one chat, not to the API
		}
		v.Until = p.resetOr(resp.Header, now, now.Add(p.cfg.ShortPenalty))
	case fatalCodes[code]:
		v.Kind = providers.Fatal
	case resp.StatusCode == http.StatusTooManyRequests:
		// A 429 that is none of the above (a gateway's, an empty body):
		// refused, so safe to send again after the hint.
		v.Kind, v.NotProcessed = providers.Transient, true
		if until, ok := penaltytime.ParseResetHeader(resp.Header, now); ok {
			v.RetryAfter = until.Sub(now)
		} else if d, ok := providers.ParseRetryAfter(resp.Header, now); ok {
			v.RetryAfter = d
		}
	case resp.StatusCode >= 500:
		v.Kind = providers.Transient
		if d, ok := providers.ParseRetryAfter(resp.Header, now); ok {
			v.RetryAfter = d
		}
		if v.Code == "" {
			v.Code = http.StatusText(resp.StatusCode)
		}
	}
	return v
}

// resetOr is the end Feishu's x-ogw-ratelimit-reset header gives, or def
// when it gives none in the future.
func (p *preset) resetOr(h http.Header, now, def time.Time) time.Time {
	if until, ok := penaltytime.ParseResetHeader(h, now); ok && until.After(now) {
		return until
	}
	return def
}

// minuteCapOnly reports whether route's level has a per-minute cap and no
// per-second one (its rules' keys lead with "m:" and "s:"; levelRules).
func minuteCapOnly(route *providers.Route) bool {
	minute := false
	for i := range route.Rules {
		switch k := route.Rules[i].Key(); {
		case strings.HasPrefix(k, "s:"):
			return false
		case strings.HasPrefix(k, "m:"):
			minute = true
		}
	}
	return minute
}
