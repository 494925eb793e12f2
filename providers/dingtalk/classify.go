package dingtalk

import (
	"bytes"
	"cmp"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
	"github.com/quotaware/throttle/providers/internal/mediatype"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// scopeKind is which of a request's scopes an error penalises.
type scopeKind int

const (
	onAPI     scopeKind = iota // the app's (or ISV suite's, in one org) API
	onCallers                  // the API, for every app and org of the deployment
	onApp                      // every API of the app
	onOrg                      // an ISV suite in one customer org; the app for an internal app
	onEgress                   // every call from this egress IP
	onMonthly                  // every metered API of the organisation
)

// endKind is the penalty's end when the answer states none.
type endKind int

const (
	endSecond  endKind = iota // the next wall-clock second
	endBackoff                // Config.Escalation: 1 s, 2 s, then 4 s as the error repeats
	endMinute                 // the next wall-clock minute
	endMonth                  // the 1st of next month, Beijing time
	endDefault                // the profile's default penalty
)

type quotaCode struct {
	scope scopeKind
	end   endKind
}

// oldQuota maps the old API's frequency-limit codes (errcode, or sub_code
// under errcode 88). The platform's global code list names them; the ends
// are used only when errmsg carries no "处罚将在 <time> 结束".
func oldQuota(code string) (quotaCode, bool) {
	switch code {
	case "90001": // all calls from this server (IP) are suspended
		return quotaCode{onEgress, endDefault}, true
	case "90002": // all callers of this API are throttled; the docs advise backing off 1 s, 2 s, 4 s
		return quotaCode{onCallers, endBackoff}, true
	case "90003": // the organisation's calls to every API are suspended
		return quotaCode{onOrg, endDefault}, true
	case "90004": // this app's credentials are suspended
		return quotaCode{onApp, endDefault}, true
	case "90005": // the organisation called this API too often (per minute)
		return quotaCode{onAPI, endMinute}, true
	case "90006": // this app called this API too often (per minute)
		return quotaCode{onAPI, endMinute}, true
	case "90007": // ISV: every call into this customer org is suspended
		return quotaCode{onOrg, endMinute}, true
	case "90008": // ISV: calls to this API in this customer org are suspended
		return quotaCode{onAPI, endMinute}, true
	case "90009": // ISV: every call into every org is suspended
		return quotaCode{onApp, endMinute}, true
	case "90010": // ISV: this API in every org is suspended; penalised per org, the narrowest scope we know
		return quotaCode{onAPI, endMinute}, true
	case "90011": // suite: every call is suspended
		return quotaCode{onApp, endMinute}, true
	case "90012": // suite: this API is suspended
		return quotaCode{onAPI, endMinute}, true
	case "90013": // suite: every call into this org is suspended
		return quotaCode{onOrg, endMinute}, true
	case "90014": // suite: this API in this org is suspended
		return quotaCode{onAPI, endMinute}, true
	case "90015", "90016": // further per-API frequency codes, undocumented: treated as per-second (a guess)
		return quotaCode{onAPI, endSecond}, true
	case "90017": // this IP used too many organisations' credentials
		return quotaCode{onEgress, endDefault}, true
	case "90018": // per app, per API, per second
		return quotaCode{onAPI, endSecond}, true
	case "90019": // ISV: per suite, per customer org, per API, per second
		return quotaCode{onAPI, endSecond}, true
	case "90020": // the organisation's monthly quota of metered calls
		return quotaCode{onMonthly, endMonth}, true
	}
	return quotaCode{}, false
}

// backsOff reports whether the penalties of code climb Config.Escalation
// (90002, QpsLimitForApi: every caller of the API).
func backsOff(code string) bool {
	q, ok := oldQuota(code)
	if rest, found := strings.CutPrefix(code, accessDenied); !ok && found {
		q, ok = newQuota(rest)
	}
	return ok && q.end == endBackoff
}

// heard counts a penalty of the ladder's codes another replica met as met
// here (providers.Profile.Heard): the API's next repeat climbs from there.
// The ladder's record is the deployment's, shared by its apps' presets.
func (p *preset) heard(scope, code string, until time.Time) {
	if backsOff(code) {
		p.backoff.Heard(scope, until, p.cfg.Clock(), &p.ladder)
	}
}

// accessDenied prefixes the new API's 403 codes, throttling or not.
const accessDenied = "Forbidden.AccessDenied."

// newQuota maps the new API's throttling codes, after accessDenied.
func newQuota(code string) (quotaCode, bool) {
	switch code {
	case "QpsLimitForAppkeyAndApi", "QpsLimitForSuitekeyAndOrgAndApi":
		return quotaCode{onAPI, endSecond}, true
	case "QpsLimitForApi": // every caller of the API, as 90002
		return quotaCode{onCallers, endBackoff}, true
	case "QpmLimitForAppkeyAndApi", "QpmLimitForSuitekeyAndOrgAndApi":
		return quotaCode{onAPI, endMinute}, true
	case "ApiCountLimitForOrg":
		return quotaCode{onMonthly, endMonth}, true
	}
	return quotaCode{}, false
}

const (
	codeRobotThrottled = "410100"
	codeIPBan          = "ip-ban"
)

// classify reads one answer. It is cheap when the answer cannot be an error:
// a 2xx answer whose body is neither JSON, HTML nor text is OK unread. The
// old API (errcode) and the new one (a string code) are read apart.
func (p *preset) classify(req *http.Request, resp *http.Response, route *providers.Route) providers.Verdict {
	status := resp.StatusCode
	ct := resp.Header.Get("Content-Type")
	if !mediatype.Peekable(ct) {
		return p.statusVerdict(status, resp.Header)
	}
	prefix, _ := providers.PeekBody(resp, p.cfg.PeekLimit)
	html := isHTML(prefix, ct)
	if isBan(prefix, html) {
		return providers.Verdict{
			Kind: providers.Quota, Scope: p.egressScope, Until: p.cfg.Clock().Add(p.cfg.IPBanPenalty),
			Code: codeIPBan, Message: "egress IP banned for exceeding the per-IP limit", NotProcessed: true,
			Unbilled: true,
		}
	}
	if html {
		return p.htmlVerdict(status, resp.Header)
	}
	c, isJSON := jsoncode.Parse(prefix)
	switch {
	case !isJSON || !c.HasCode:
		return p.statusVerdict(status, resp.Header)
	case c.CodeKey == "code" && !c.CodeIsString:
		// A numeric "code" is no DingTalk error field: data of a success.
		v := p.statusVerdict(status, resp.Header)
		if v.Kind != providers.OK {
			v.Code, v.Message = c.Code, c.Message
		}
		return v
	case c.CodeKey == "errcode":
		return p.oldAPIVerdict(req, resp, route, c)
	}
	return p.newAPIVerdict(req, resp, route, c)
}

// oldAPIVerdict reads the old API's errcode, wrapped as 88 + sub_code on
// /topapi paths.
func (p *preset) oldAPIVerdict(req *http.Request, resp *http.Response, route *providers.Route, c jsoncode.Code) providers.Verdict {
	code, msg := c.Code, c.Message
	if code == "88" && c.SubCode != "" {
		code = c.SubCode
		if c.SubMsg != "" {
			msg = c.SubMsg
		}
	}
	if code == "0" {
		return p.statusVerdict(resp.StatusCode, resp.Header)
	}
	if q, ok := oldQuota(code); ok {
		return p.quota(route, q, code, msg, c.Message, p.cfg.Clock())
	}
	switch code {
	case "-1": // system busy: retry at most 3 times, per the docs
		return providers.Verdict{Kind: providers.Transient, Code: code, Message: msg, NotProcessed: true}
	case codeRobotThrottled:
		// Only a robot's own route names the robot: elsewhere the code is
		// no robot's, and is read like any other unknown code.
		if robot := route.Scope(scopekind.Entity); robot != "" && p.robotRule.Limit() > 0 {
			return providers.Verdict{Kind: providers.Quota, Scope: robot, Until: p.cfg.Clock().Add(p.cfg.RobotPenalty),
				Code: code, Message: msg, NotProcessed: true, Unbilled: true}
		}
	}
	if v := p.statusVerdict(resp.StatusCode, resp.Header); v.Kind == providers.Transient {
		v.Code, v.Message = code, msg
		return v
	}
	return providers.Verdict{Kind: providers.Fatal, Code: code, Message: msg}
}

// newAPIVerdict reads the new API's string code. On a 2xx answer a "code"
// member is data unless it is one of the codes below.
func (p *preset) newAPIVerdict(req *http.Request, resp *http.Response, route *providers.Route, c jsoncode.Code) providers.Verdict {
	code, msg := c.Code, c.Message
	if rest, ok := strings.CutPrefix(code, accessDenied); ok {
		if q, ok := newQuota(rest); ok {
			return p.quota(route, q, code, msg, "", p.cfg.Clock())
		}
		if resp.StatusCode < 300 {
			return providers.Verdict{Kind: providers.OK} // data that looks like a code
		}
		// AccessTokenPermissionDenied, IpNotInWhiteList, ...: no retry mends them.
		return providers.Verdict{Kind: providers.Fatal, Code: code, Message: msg}
	}
	if code == "system.busy" || code == "systemBusy" {
		v := providers.Verdict{Kind: providers.Transient, Code: code, Message: msg, NotProcessed: true}
		v.RetryAfter, _ = providers.ParseRetryAfter(resp.Header, p.cfg.Clock())
		return v
	}
	v := p.statusVerdict(resp.StatusCode, resp.Header)
	if v.Kind != providers.OK {
		v.Code, v.Message = code, msg
	}
	return v
}

// quota builds a Quota verdict: the end stated in the message when there is
// one, else the end the code implies.
// The scopes come from the request's route, never rebuilt here.
func (p *preset) quota(route *providers.Route, q quotaCode, code, msg, altMsg string, now time.Time) providers.Verdict {
	// A rate limit's refusal is not billed against the month (PROVIDERS.md);
	// the month's own refusal spends nothing more either way.
	v := providers.Verdict{Kind: providers.Quota, Code: code, Message: msg, NotProcessed: true, Unbilled: q.scope != onMonthly}
	// A robot's route has no API scope: its robot is its API.
	api := cmp.Or(route.Scope(scopekind.API), route.Scope(scopekind.Entity), p.appScope)
	switch q.scope {
	case onAPI:
		v.Scope = api
	case onCallers:
		// Every app and org of ours calls the API under the same limit:
		// one app's refusal stops them all (a route without the scope, a
		// robot's, stops its own API).
		v.Scope = cmp.Or(route.Scope(scopekind.Callers), api)
	case onApp:
		v.Scope = p.appScope
	case onOrg:
		// The ISV suite in the customer org; the app for an internal app.
		v.Scope = cmp.Or(route.Scope(scopekind.Org), p.appScope)
	case onEgress:
		v.Scope = p.egressScope
	case onMonthly:
		// The organisation's metered APIs when this is one of them; else
		// the platform meters an API we did not know of: stop that one.
		v.Scope = cmp.Or(route.Scope(scopekind.Monthly), api)
	}
	end, ok := penaltytime.ParseBeijingEnd(msg, now)
	if !ok && altMsg != "" {
		end, ok = penaltytime.ParseBeijingEnd(altMsg, now)
	}
	if ok && end.After(now) {
		v.Until, v.Stated = end, true
		return v
	}
	switch q.end {
	case endSecond:
		v.Until = penaltytime.NextSecond(now)
	case endBackoff:
		v.Until = p.backoff.Penalty(v.Scope, now, &p.ladder)
	case endMinute:
		v.Until = penaltytime.NextMinute(now)
	case endMonth:
		// The month starts MonthGrace late for the limiter too.
		v.Until = penaltytime.MonthEnd(now, p.cfg.MonthGrace)
	case endDefault:
		if ok { // a stated end already past: the penalty is as good as over
			v.Until = penaltytime.NextSecond(now)
		}
		// Zero: the profile's DefaultPenalty.
	}
	return v
}

// statusVerdict classifies by status alone, for answers without an error
// code.
func (p *preset) statusVerdict(status int, h http.Header) providers.Verdict {
	switch {
	case status < 400:
		return providers.Verdict{Kind: providers.OK}
	case status == http.StatusTooManyRequests:
		// 429 without a known code: not processed, worth a retry later.
		v := providers.Verdict{Kind: providers.Transient, Code: "429", NotProcessed: true}
		v.RetryAfter, _ = providers.ParseRetryAfter(h, p.cfg.Clock())
		return v
	case status >= 500:
		v := providers.Verdict{Kind: providers.Transient, Code: http.StatusText(status)}
		v.RetryAfter, _ = providers.ParseRetryAfter(h, p.cfg.Clock())
		return v
	}
	return providers.Verdict{Kind: providers.Fatal, Code: http.StatusText(status)}
}

// banMarkers are found in the anti-abuse page the gateway serves to a
// banned IP (Alibaba's x5 / tmd "punish" page), and in no other page: a
// proxy's or firewall's "access denied" must not stop every API. The word
// "punish" alone is not one: the page carries it inside its tmd path, and
// any page or file an API returns may carry it in its text ("punishment"),
// which would have stopped every API of the egress IP for 5 minutes.
var banMarkers = [][]byte{[]byte("x5sec"), []byte("_____tmd_____")}

// isHTML reports an HTML answer, by its type or its first byte.
func isHTML(prefix []byte, ct string) bool {
	return mediatype.IsHTML(ct) || bytes.HasPrefix(bytes.TrimSpace(prefix), []byte("<"))
}

// isBan recognises the per-IP ban by its own signatures only: the JSON
// {"status":1111,"wait":5,"source":"x5","punish":"deny",...}, or an HTML
// page with the gateway's markers, whatever the status.
func isBan(prefix []byte, html bool) bool {
	if len(prefix) == 0 {
		return false
	}
	if html {
		for _, m := range banMarkers {
			if bytes.Contains(prefix, m) {
				return true
			}
		}
		return false
	}
	var status1111, punish, deny, source bool
	jsoncode.Scan(prefix, func(key []byte, kind jsoncode.ValueKind, v []byte) bool {
		switch string(key) {
		case "status":
			status1111 = string(v) == "1111"
		case "punish":
			punish, deny = true, string(v) == "deny"
		case "source":
			source = true
		}
		return true
	})
	return deny || status1111 && (punish || source)
}

// htmlVerdict reads an HTML answer that is not the ban page. DingTalk's APIs
// never answer HTML, so it came from something in front of them (a proxy, a
// firewall, a gateway): a 403 or 429 there is transient and the API never
// saw the call; other statuses read as usual.
func (p *preset) htmlVerdict(status int, h http.Header) providers.Verdict {
	if status == http.StatusForbidden || status == http.StatusTooManyRequests {
		v := providers.Verdict{Kind: providers.Transient, Code: strconv.Itoa(status), NotProcessed: true}
		v.RetryAfter, _ = providers.ParseRetryAfter(h, p.cfg.Clock())
		return v
	}
	return p.statusVerdict(status, h)
}
