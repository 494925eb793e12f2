package wecom

import (
	"net/http"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// peekLimit bounds how much of a body Classify reads: WeCom's error bodies
// are a few hundred bytes with errcode first.
const peekLimit = 4 << 10

// maxMessage bounds Verdict.Message, which ends up in errors and logs.
const maxMessage = 256

// Codes Classify acts on.
const (
	codeBusy       = "-1"
	codeFreq       = "45009"
	codeConcurrent = "45033"
)

// retryCodes are conflicts and traffic alarms: the call was refused, and a
// slower retry may pass.
var retryCodes = map[string]bool{
	"45035": true, // concurrent update conflict
	"45036": true, // abnormal traffic
	"6000":  true, // data version conflict
}

// fatalCodes are errors no retry mends: a token to refresh, an API or
// address the app may not use.
var fatalCodes = map[string]bool{
	"40014": true, // invalid access_token
	"42001": true, // access_token expired
	"41001": true, // access_token missing
	"48002": true, // api forbidden
	"60011": true, // no privilege to access or modify
	"60020": true, // caller IP not allowed
}

// concurrentHint is the Message of a 45033 verdict.
const concurrentHint = "too many concurrent calls to this API by the company: lower the number in flight"

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
		return providers.Verdict{Kind: providers.OK}
	}
	v := providers.Verdict{Code: code, Message: msg}
	switch {
	case code == codeFreq:
		// The body does not say which window tripped; the escalation
		// guesses from how soon it comes back.
		v.Kind, v.NotProcessed = providers.Quota, true
		v.Scope = route.Scope(scopekind.API)
		v.Until = p.strikes.Penalty(v.Scope, p.cfg.Clock(), &p.ladder)
	case code == codeConcurrent:
		v.Kind, v.NotProcessed = providers.Transient, true
		v.RetryAfter = p.cfg.ConcurrentRetry
		v.Message = concurrentHint + " (" + msg + ")"
	case code == codeBusy || retryCodes[code]:
		v.Kind, v.NotProcessed = providers.Transient, true
	case fatalCodes[code]:
		v.Kind = providers.Fatal
	}
	if route.API == tokenAPI && v.Kind != providers.Quota && v.Kind != providers.Transient && !p.cfg.NoFailedTokenPenalty {
		// A refused exchange (see Config.FailedTokenPenalty): the next
		// with the same secret waits, whoever sends it, so that a wrong
		// secret retried in a loop stays under WeCom's interception; the
		// company's other secrets go on. Not retried: the answer would be
		// the same.
		v.Kind, v.NoRetry = providers.Quota, true
		v.Scope = p.tokenScope(req)
		v.Until = p.cfg.Clock().Add(p.cfg.FailedTokenPenalty)
		v.Message = "token exchange refused, the next with this secret held " + p.cfg.FailedTokenPenalty.String() + " (" + msg + ")"
	}
	return v
}

// tokenAPI is the token exchange, whose failures WeCom intercepts.
const tokenAPI = "/cgi-bin/gettoken"

// tokenScope is the penalty scope of one secret's token exchanges: the
// company's gettoken and the secret's keyed hash (never the secret).
func (p *preset) tokenScope(req *http.Request) string {
	secret := ""
	if req != nil && req.URL != nil {
		secret = req.URL.Query().Get("corpsecret")
	}
	return scopekind.Of(scopekind.API, scopekind.Fit(p.cfg.CorpID+":", tokenAPI+"@"+p.entities.Sum("secret", secret)))
}
