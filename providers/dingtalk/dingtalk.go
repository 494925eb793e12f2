package dingtalk

import (
	"errors"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
	"github.com/quotaware/throttle/providers/internal/entityhash"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/routecache"
	"github.com/quotaware/throttle/providers/internal/scopekind"
	"github.com/quotaware/throttle/providers/internal/strikes"
)

// apiCatalog is DingTalk's API catalog, both generations, built on first
// use.
var apiCatalog = sync.OnceValue(func() *catalog.Catalog { return catalog.MustNew(catalogTemplates...) })

// meteredMethods are the methods a MeteredPaths entry is looked up with: an
// entry names a path, and the new API's catalog names method and path.
var meteredMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch}

// Name is the profile's name and limiter group: every DingTalk key shares
// one Redis hash tag, so the per-IP rule and the per-API rules of all apps
// can be charged in one script call.
const Name = "dingtalk"

// robotPath is the custom group robot webhook: limited per robot (its
// access_token), not per app.
const robotPath = "/robot/send"

// preset holds what New computed once for one app: rule templates (rules are
// re-keyed per request with Rule.WithKey), fixed keys and scopes, and a
// cache of routes per API (and org).
type preset struct {
	cfg   settings
	hosts func(*http.Request) bool

	apis        *catalog.Catalog // DingTalk's APIs
	extra       *catalog.Catalog // App.APIs and MeteredPaths apis lacks, searched first
	apiRule     rule.Rule        // per app (or per suite and org), per API
	egressRule  rule.Rule
	monthRule   rule.Rule       // zero when there is no monthly quota
	robotRule   rule.Rule       // zero when robots are not limited
	metered     map[string]bool // by API name
	appScope    string
	egressScope string
	robots      *entityhash.Hasher // names robots by their tokens
	routes      routecache.Cache   // by org + "\x00" + API
	backoff     *strikes.Book      // of each API's repeated global-limit errors
	ladder      strikes.Ladder     // their penalties (Config.Escalation)
}

// The docs' backoff for the global per-API error (Config.Escalation).
var defaultEscalation = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

const defaultEscalationWindow = 10 * time.Second

// maxBackoffScopes bounds the APIs whose global-limit errors are
// remembered, for every app of a Preset.
const maxBackoffScopes = 4096

func newPreset(c settings) (*preset, error) {
	p := &preset{
		cfg:         c,
		hosts:       providers.MatchHosts(c.Hosts...),
		metered:     make(map[string]bool, len(c.MeteredPaths)),
		appScope:    boundKey(scopekind.Of(scopekind.App, c.AppKey)),
		egressScope: scopekind.Of(scopekind.Egress, c.Egress),
		robots:      entityhash.New(c.EntityKey, "dingtalk robots"),
		apis:        apiCatalog(),
		backoff:     c.backoff,
		ladder:      strikes.Ladder{Steps: slices.Clone(c.Escalation), Window: c.EscalationWindow},
	}
	if p.backoff == nil { // a Config not built through New
		p.backoff = strikes.New(maxBackoffScopes)
	}
	extra := slices.Clone(c.APIs)
	slices.Sort(extra)
	var err error
	if p.extra, err = catalog.New(slices.Compact(extra)...); err != nil {
		return nil, fieldErr("APIs", "%v", err)
	}
	for _, mp := range c.MeteredPaths {
		found := false
		for _, m := range meteredMethods {
			if a := p.extra.Lookup(m, mp); a != nil {
				p.metered[a.Name], found = true, true
			} else if a := p.apis.Lookup(m, mp); a != nil {
				p.metered[a.Name], found = true, true
			}
		}
		if !found {
			// A typo would meter an API nobody calls and leave the real
			// one off the month's count, until DingTalk's 90020 stops
			// the org's metered APIs for the rest of the month.
			return nil, fieldErr("MeteredPaths", "%q is no API of the catalog (a typo?); an API DingTalk published after this release goes in APIs too", mp)
		}
	}
	// Paced rules keep Limit in any Period+Jitter: see Config.Jitter.
	if p.apiRule, err = rule.New("api", c.apiRate(), time.Second+c.Jitter, rule.WithBurst(c.Burst)); err != nil {
		return nil, err
	}
	if p.egressRule, err = rule.New("egress:"+c.Egress, c.EgressLimit, c.EgressPeriod+c.Jitter, rule.WithBurst(c.EgressBurst)); err != nil {
		return nil, err
	}
	if !c.NoMonthlyQuota && len(p.metered) > 0 {
		if p.monthRule, err = rule.NewCalendar(p.monthKey(), c.MonthlyQuota, rule.Month, penaltytime.Beijing(), rule.WithGrace(c.MonthGrace)); err != nil {
			return nil, err
		}
	}
	if !c.NoRobotLimit {
		// A sliding window: a robot may post its 20 messages of a minute
		// at once (an alert storm), which even pacing would spread over it.
		// One robot among many sharing the egress rule: a post held back
		// by its robot's window waits without booking the egress ahead
		// (at most 50ms), so other robots and APIs are not held behind it.
		if p.robotRule, err = rule.NewWindow("robot", c.RobotPerMinute, c.RobotWindow+c.Jitter,
			rule.WithMaxBookAhead(50*time.Millisecond)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// monthKey is the monthly quota's rule key: the organisation's.
func (p *preset) monthKey() string {
	org := p.cfg.CorpID
	if org == "" {
		org = p.cfg.AppKey
	}
	return "month:" + org
}

// monthScope is the penalty scope of the monthly quota: every metered API of
// the organisation, and nothing else (unmetered APIs keep working).
func (p *preset) monthScope() string {
	return boundKey(scopekind.Of(scopekind.Monthly, strings.TrimPrefix(p.monthKey(), "month:")))
}

func (p *preset) match(req *http.Request) bool {
	return p.hosts(req)
}

// errNoOrg reports an ISV request whose customer org is unknown.
var errNoOrg = errors.New("dingtalk: ISV request without a customer org: name it (throttle.ContextWithTenant), let throttle.WithApps learn it from the org's token, set App.CorpID or make OrgFromRequest return one")

// route returns the request's rules and scopes. Routes are cached per API
// (and org): the slices are shared, capped so that an append copies them,
// and must not be modified in place.
func (p *preset) route(req *http.Request) (providers.Route, error) {
	api, known := p.apiOf(req)
	if api == robotPath && p.robotRule.Limit() > 0 {
		return p.robotRoute(req, api)
	}
	org := ""
	if p.cfg.ISV {
		if p.cfg.OrgFromRequest != nil {
			org = p.cfg.OrgFromRequest(req)
		}
		if org == "" {
			org = p.cfg.CorpID
		}
		if org == "" {
			return providers.Route{}, errNoOrg
		}
	}
	cacheKey := api
	if org != "" {
		cacheKey = org + "\x00" + api
	}
	return p.routes.Get(cacheKey, func() (providers.Route, error) {
		built, err := p.buildRoute(api, org)
		built.Uncatalogued = !known
		return built, err
	})
}

// apiOf returns the API a request calls, or catalog.Uncatalogued and false:
// every path the catalogs do not know is one API, so IDs never make many.
// It reads the path as sent (an ID holding an escaped "/" is one segment,
// as the provider reads it).
func (p *preset) apiOf(req *http.Request) (string, bool) {
	return catalog.Find(req.Method, apipath.Sent(req.URL), p.extra, p.apis)
}

func (p *preset) buildRoute(api, org string) (providers.Route, error) {
	rules := make([]rule.Rule, 0, 3)
	scopes := make([]string, 0, 6)
	apiScope := p.apiScope(api, org)
	r, err := p.apiRule.WithKey(apiScope)
	if err != nil {
		return providers.Route{}, err
	}
	rules = append(rules, r, p.egressRule)
	scopes = append(scopes, apiScope)
	if api != catalog.Uncatalogued {
		// Every path no catalog knows is one API here, but DingTalk
		// limits each apart: all of them stopped together for one
		// refusal would stop APIs that refused nothing.
		scopes = append(scopes, p.callersScope(api))
	}
	scopes = append(scopes, p.appScope)
	if org != "" {
		scopes = append(scopes, p.orgScope(org))
	}
	scopes = append(scopes, p.egressScope)
	if p.monthRule.Limit() > 0 && p.metered[api] {
		month, scope := p.monthRule, p.monthScope()
		if org != "" {
			// An ISV suite's calls count against the customer org's own
			// quota, and its 90020 stops that org only.
			if month, err = p.monthRule.WithKey(boundKey("month:" + org)); err != nil {
				return providers.Route{}, err
			}
			scope = boundKey(scopekind.Of(scopekind.Monthly, org))
		}
		rules = append(rules, month)
		scopes = append(scopes, scope)
	}
	return providers.Route{API: api, Rules: rules[:len(rules):len(rules)], Scopes: scopes[:len(scopes):len(scopes)]}, nil
}

// apiScope names one API of the app ("api:<app>:<path>"), or for an ISV
// app one API of the suite in one customer org ("api:<suite>@<org>:<path>").
// It is also the per-API rule's key. An API is a URL path, whatever the
// method, as DingTalk counts it (its errors name the apiPath): the new
// API's catalog names a path's methods apart ("POST /v1.0/...", "PUT
// /v1.0/..."), and limited apart they could reach twice the path's limit.
func (p *preset) apiScope(api, org string) string {
	id := p.cfg.AppKey
	if org != "" {
		id += "@" + org
	}
	return boundKey(scopekind.Of(scopekind.API, id+":"+pathOf(api)))
}

// callersScope names one API for every app and org of the deployment
// ("callers:<path>"): DingTalk's limit on all callers of an API (90002,
// QpsLimitForApi) refuses them all alike.
func (p *preset) callersScope(api string) string {
	return boundKey(scopekind.Of(scopekind.Callers, pathOf(api)))
}

// pathOf is the URL path (template) of a catalog's API name, which may
// lead with its method; of the catalog's templates that name one path's
// parameters differently (DELETE .../documents/{docKey}/blocks/{blockId},
// PUT .../documents/{documentId}/blocks/{blockId}), the first one's.
func pathOf(api string) string {
	if i := strings.IndexByte(api, ' '); i >= 0 {
		api = api[i+1:]
	}
	if same, ok := samePaths()[api]; ok {
		return same
	}
	return api
}

// samePaths maps each catalog path whose parameters another template of
// the same path names differently to the first of them.
var samePaths = sync.OnceValue(func() map[string]string {
	first := map[string]string{} // by the path with its parameters unnamed
	same := map[string]string{}
	for _, t := range catalogTemplates {
		_, path, ok := strings.Cut(t, " ")
		if !ok {
			path = t
		}
		key := unnamed(path)
		if f, seen := first[key]; !seen {
			first[key] = path
		} else if f != path {
			same[path] = f
		}
	}
	return same
})

// unnamed is path with each {parameter} written {}.
func unnamed(path string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(path, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(path[open:], '}')
		if end < 0 {
			break
		}
		b.WriteString(path[:open] + "{}")
		path = path[open+end+1:]
	}
	b.WriteString(path)
	return b.String()
}

// orgScope names the ISV suite's calls into one customer org.
func (p *preset) orgScope(org string) string {
	return boundKey(scopekind.Of(scopekind.Org, p.cfg.AppKey+"@"+org))
}

// robotRoute limits one custom group robot, named by a hash of its token so
// that the token never reaches keys, scopes or telemetry.
func (p *preset) robotRoute(req *http.Request, api string) (providers.Route, error) {
	scope := p.robotScope(req)
	r, err := p.robotRule.WithKey(scope)
	if err != nil {
		return providers.Route{}, err
	}
	return providers.Route{
		API:    api,
		Rules:  []rule.Rule{r, p.egressRule},
		Scopes: []string{scope, p.egressScope},
	}, nil
}

func (p *preset) robotScope(req *http.Request) string {
	tok := req.URL.Query().Get("access_token")
	return scopekind.Of(scopekind.Entity, "robot#"+p.robots.Sum("robot", tok))
}

// boundKey keeps a key within rule.MaxKeyLen: a longer one keeps its
// head, cut at a character boundary, and ends in a hash of the whole, so
// distinct keys stay distinct.
func boundKey(s string) string {
	if len(s) <= rule.MaxKeyLen {
		return s
	}
	cut := rule.MaxKeyLen - 17
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "#" + hash16(s)
}

func hash16(s string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	v := strconv.FormatUint(h.Sum64(), 16)
	return strings.Repeat("0", 16-len(v)) + v
}
