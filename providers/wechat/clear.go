package wechat

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
)

// WeChat's quota resets. An account may reset all its daily counts 10
// times a month, and one API's 50 times; past that they answer 48006. A
// reset the Transport sees succeed ends the account's 45009 penalties and
// starts the day's counts again (Verdict.Cleared), on every replica: without
// it, the quota an operator cleared at noon stayed refused until midnight.
// The reset with the AppSecret (/cgi-bin/clear_quota/v2) is not read.
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

// resetsThisAccount reports whether a reset sent as req is known to be this
// account's: WeChat resets the account of the token, and the request is
// charged to this account's profile either by the app it is tagged with
// (learned from that token, or given by the caller) or, untagged, as the
// one account listed, which may not be the token's (an account of another
// service's). So an untagged one must also name the account in its body
// (clear_quota's appid, which WeChat requires to be the token's); never
// the shared account of unknown ones, which stands for many.
func (p *preset) resetsThisAccount(req *http.Request, api string) bool {
	if p.cfg.AppID == unknownApp {
		return false
	}
	a, tagged := apps.FromContext(req.Context())
	if tagged {
		if a.ID != p.cfg.AppID {
			return false
		}
	} else if len(p.cfg.Apps) != 1 || api != clearQuotaPath {
		return false
	}
	if api == clearQuotaPath {
		id, ok := resetField(req, "appid")
		if ok && id != p.cfg.AppID || !ok && !tagged {
			return false
		}
	}
	return true
}

// cleared is what a successful reset of route's API ended for this account,
// or nil. clear_quota resets every daily count, but not the forced
// refreshes of stable_token, which WeChat documents apart; quota/clear one
// API's, named by its path in the body (read again through GetBody: a
// body that cannot be read clears nothing, nor does a path the catalogs do
// not know, whose scope stands for every such path).
func (p *preset) cleared(req *http.Request, route *providers.Route) *providers.Cleared {
	if !p.resetsThisAccount(req, route.API) {
		return nil
	}
	st := p.state.Load()
	switch route.API {
	case clearQuotaPath:
		var rs []rule.Rule
		for _, rules := range st.byAPI {
			if i := dailyIndex(rules); i >= 0 {
				rs = append(rs, rules[i])
			}
		}
		return &providers.Cleared{Scopes: p.accountScopes(), Code: codeDailyQuota, Rules: rs}
	case quotaClearPath:
		path, ok := resetField(req, "cgi_path")
		if !ok {
			return nil
		}
		api, known := catalog.Find(http.MethodPost, path, p.extra, p.apis)
		if !known {
			return nil
		}
		c := &providers.Cleared{Scopes: []string{p.apiScope(api)}, Code: codeDailyQuota}
		if i := dailyIndex(st.byAPI[api]); i >= 0 {
			c.Rules = []rule.Rule{st.byAPI[api][i]}
		}
		return c
	}
	return nil
}

// accountScopes are the penalty scopes of every API of the account: each
// catalogued API, each listed path the catalog lacks, and the one scope of
// paths no catalog knows; not the forced refreshes'. Built on first use.
func (p *preset) accountScopes() []string {
	p.scopesOnce.Do(func() {
		p.scopes = make([]string, 0, len(catalogTemplates)+p.extra.Len()+1)
		for _, t := range catalogTemplates {
			p.scopes = append(p.scopes, p.apiScope(t))
		}
		for _, m := range []map[string]int{p.cfg.Daily, p.cfg.PerMinute} {
			for path := range m {
				a := p.apis.Lookup(http.MethodPost, path)
				if sc := p.apiScope(path); (a == nil || a.Name != path) && !slices.Contains(p.scopes, sc) {
					p.scopes = append(p.scopes, sc)
				}
			}
		}
		p.scopes = append(p.scopes, p.apiScope(catalog.Uncatalogued))
	})
	return p.scopes
}

// resetScopes is accountScopes' cache.
type resetScopes struct {
	scopesOnce sync.Once
	scopes     []string
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
