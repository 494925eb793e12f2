package wechat

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
)

// WeChat's quota resets. An account may reset all its daily counts 10
// times a month, and one API's 50 times; past that they answer 48006. A
// reset the Transport sees succeed ends the account's 45009 penalties and
// starts the day's counts again (Verdict.Cleared), on every replica: without
// it, the quota an operator cleared at noon stayed refused until midnight.
const (
	clearQuotaPath = "/cgi-bin/clear_quota"         // {"appid"}: every daily count of the account
	quotaClearPath = "/cgi-bin/openapi/quota/clear" // {"cgi_path"}: one API's daily count
	codeClearLimit = "48006"                        // the month's resets are used up
)

// maxResetBody bounds how much of a reset's request body is read again:
// {"appid": ...} or {"cgi_path": ...}.
const maxResetBody = 4 << 10

// isReset reports whether api resets daily counts.
func isReset(api string) bool { return api == clearQuotaPath || api == quotaClearPath }

// cleared is what a successful reset of route's API ended for this account,
// or nil. clear_quota resets every daily count, but not the forced
// refreshes of stable_token, which WeChat documents apart. The body names
// the account or the API; one that names another account clears nothing
// here, and quota/clear's needs its path: without a body to read again
// (no GetBody) nothing is cleared, and the counts stay until midnight as
// before.
func (p *preset) cleared(req *http.Request, route *providers.Route) *providers.Cleared {
	st := p.state.Load()
	switch route.API {
	case clearQuotaPath:
		if id, ok := resetField(req, "appid"); ok && id != p.cfg.AppID {
			return nil
		}
		var rs []rule.Rule
		for _, rules := range st.byAPI {
			if i := dailyIndex(rules); i >= 0 {
				rs = append(rs, rules[i])
			}
		}
		prefix, forced := p.apiScope(""), p.apiScope(forcedRoute)
		return &providers.Cleared{Rules: rs, Lifts: func(scope, code string) bool {
			return code == codeDailyQuota && strings.HasPrefix(scope, prefix) && scope != forced
		}}
	case quotaClearPath:
		path, ok := resetField(req, "cgi_path")
		if !ok {
			return nil
		}
		api, _ := catalog.Find(http.MethodPost, path, p.extra, p.apis)
		scope := p.apiScope(api)
		c := &providers.Cleared{Lifts: func(s, code string) bool { return code == codeDailyQuota && s == scope }}
		if i := dailyIndex(st.byAPI[api]); i >= 0 {
			c.Rules = []rule.Rule{st.byAPI[api][i]}
		}
		return c
	}
	return nil
}

// resetField reads one string member of a reset's JSON body again, through
// GetBody (the body itself was sent), or reports false.
func resetField(req *http.Request, name string) (string, bool) {
	if req.GetBody == nil {
		return "", false
	}
	body, err := req.GetBody()
	if err != nil {
		return "", false
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxResetBody+1))
	if err != nil || len(raw) > maxResetBody {
		return "", false
	}
	var m map[string]json.RawMessage
	var v string
	if json.Unmarshal(raw, &m) != nil || json.Unmarshal(m[name], &v) != nil || v == "" {
		return "", false
	}
	return v, true
}
