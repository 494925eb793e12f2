package wecom

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

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

// apiCatalog is WeCom's API catalog, built on first use.
var apiCatalog = sync.OnceValue(func() *catalog.Catalog { return catalog.MustNew(catalogTemplates...) })

// Name is the profile's name and limiter group.
const Name = "wecom"

// defaultHosts are the hosts of the WeCom server API.
var defaultHosts = []string{"qyapi.weixin.qq.com"}

// Documented limits, per API.
const (
	defaultCorpPerMinute = 10000
	defaultCorpPerHour   = 150000
	defaultIPPerMinute   = 20000
	defaultIPPerHour     = 600000
	// Third-party providers serve many companies from one egress IP.
	defaultThirdPartyIPPerMinute = 40000
	defaultThirdPartyIPPerHour   = 1200000
)

// Defaults of Config's and App's durations and sizes, each stated in its
// field's doc comment.
const (
	defaultJitter           = 50 * time.Millisecond
	defaultEscalationWindow = 10 * time.Minute
	defaultConcurrentRetry  = time.Second
	// A refused token exchange holds the company's next: 3,600 / 3 = 1,200
	// failures an hour at most, under the ~2,000 reported to block.
	defaultFailedTokenPenalty = 3 * time.Second
	defaultInFlightLease      = 30 * time.Second
	defaultMaxTracked         = 1024
	// App messages to one member: more are dropped without an error.
	defaultPerMemberPerMinute = 30
	defaultPerMemberPerHour   = 1000
	defaultMemberPeekLimit    = 1 << 20
	// The share of a member's limits left to what the preset cannot
	// attribute to a named member ("@all", parties, tags, ...): the
	// members named in touser get the rest.
	defaultBroadcastPerMinute = 5
	defaultBroadcastPerHour   = 100
	defaultDayGrace           = 5 * time.Second
)

// defaultEscalation returns the documented block lengths of the minute and
// hour limits, the first steps of a repeated 45009's penalty.
func defaultEscalation() []time.Duration { return []time.Duration{time.Minute, time.Hour} }

// profileOf builds one company's profile, or reports the Config field at fault.
func profileOf(cfg settings) (providers.Profile, error) {
	cfg.Escalation = slices.Clone(cfg.Escalation) // the profile keeps its own copy
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return providers.Profile{}, err
	}
	p := &preset{cfg: cfg, hosts: providers.MatchHosts(cfg.Hosts...), strikes: strikes.New(cfg.MaxTracked),
		apis: apiCatalog(), extra: catalog.MustNew(slices.Compact(slices.Sorted(slices.Values(cfg.APIs)))...)}
	// A 45009 within EscalationWindow of the last one's end climbs
	// Escalation, then blocks the rest of the Beijing day (plus DayGrace),
	// never less than the last step.
	last, grace := cfg.Escalation[len(cfg.Escalation)-1], cfg.DayGrace
	p.ladder = strikes.Ladder{Steps: cfg.Escalation, Window: cfg.EscalationWindow, Top: func(now time.Time) time.Time {
		if day := penaltytime.DayEnd(now, grace); day.After(now.Add(last)) {
			return day
		}
		return now.Add(last)
	}}
	// Templates: the limits are the same for every API, so Route only
	// re-keys them. Every limit is a sliding window: WeCom counts a minute
	// or an hour, so a batch that fits the window goes at once instead of
	// being spread over it.
	tpl := []struct {
		field  string
		limit  int
		period time.Duration
	}{
		{"App.CorpPerMinute", cfg.CorpPerMinute, time.Minute},
		{"App.CorpPerHour", cfg.CorpPerHour, time.Hour},
		{"Config.IPPerMinute", cfg.IPPerMinute, time.Minute},
		{"Config.IPPerHour", cfg.IPPerHour, time.Hour},
	}
	for i, t := range tpl {
		r, err := rule.NewWindow("template", t.limit, cfg.scaled(t.period)+cfg.Jitter)
		if err != nil {
			return providers.Profile{}, fmt.Errorf("wecom: %s: %w", t.field, err)
		}
		p.templates[i] = r
	}
	if !cfg.NoPerMemberLimit {
		// One member among the many that share the corp's and the egress
		// IP's rules: a message held back by its member waits for the
		// member's slot without booking the shared rules ahead, so the
		// other members' messages are not held behind it.
		// The named members and the broadcast share one member's limits
		// (member.go).
		var err error
		ahead := rule.WithMaxBookAhead(memberBookAhead)
		pair := func(perMinute, perHour int, field string) (m, h rule.Rule, err error) {
			if m, err = rule.New("template", perMinute, cfg.scaled(time.Minute)+cfg.Jitter, ahead); err != nil {
				return m, h, fmt.Errorf("wecom: App.%sPerMinute: %w", field, err)
			}
			if h, err = rule.New("template", perHour, cfg.scaled(time.Hour)+cfg.Jitter,
				rule.WithBurst(min(perMinute, perHour)), ahead); err != nil {
				return m, h, fmt.Errorf("wecom: App.%sPerHour: %w", field, err)
			}
			return m, h, nil
		}
		if p.memberMinute, p.memberHour, err = pair(cfg.PerMemberPerMinute-cfg.BroadcastPerMinute,
			cfg.PerMemberPerHour-cfg.BroadcastPerHour, "PerMember"); err != nil {
			return providers.Profile{}, err
		}
		if p.broadcastMinute, p.broadcastHour, err = pair(cfg.BroadcastPerMinute, cfg.BroadcastPerHour, "Broadcast"); err != nil {
			return providers.Profile{}, err
		}
	}
	if cfg.MaxInFlight > 0 {
		r, err := rule.NewConcurrency("template", cfg.MaxInFlight, cfg.InFlightLease)
		if err != nil {
			return providers.Profile{}, fmt.Errorf("wecom: App.MaxInFlight: %w", err)
		}
		p.inFlight = &r
	}
	p.entities = entityhash.New(cfg.EntityKey, cfg.CorpID)
	p.prefixes = [4]string{
		"corp:m:" + cfg.CorpID + ":", "corp:h:" + cfg.CorpID + ":",
		"ip:m:" + cfg.Egress + ":", "ip:h:" + cfg.Egress + ":",
	}
	return providers.Profile{
		Name:           Name,
		Match:          p.match,
		Route:          p.route,
		Classify:       p.classify,
		DefaultPenalty: cfg.DefaultPenalty,
		Heard:          p.heard,
	}, nil
}

// heard counts a 45009 of this company's another replica met as met here
// (providers.Profile.Heard): its next repeat climbs the ladder from there.
func (p *preset) heard(scope, code string, until time.Time) {
	if code == codeFreq && strings.HasPrefix(scope, p.apiScope("")) {
		p.strikes.Heard(scope, until, p.cfg.Clock(), &p.ladder)
	}
}

type preset struct {
	cfg       settings
	hosts     func(*http.Request) bool
	templates [4]rule.Rule
	prefixes  [4]string
	inFlight  *rule.Rule // MaxInFlight, when set
	// Templates of the per-member rules and of the broadcast share; zero
	// when off.
	memberMinute, memberHour       rule.Rule
	broadcastMinute, broadcastHour rule.Rule
	entities                       *entityhash.Hasher
	strikes                        *strikes.Book
	ladder                         strikes.Ladder   // of a repeated 45009
	apis                           *catalog.Catalog // WeCom's APIs
	extra                          *catalog.Catalog // Config.APIs, searched first
	routes                         routecache.Cache // by API name
}

func (p *preset) match(r *http.Request) bool {
	return p.hosts(r)
}

// route names the request's API by the catalogs. Routes are built once per
// API and shared: their slices must not be modified.
func (p *preset) route(r *http.Request) (providers.Route, error) {
	api, known := catalog.Find(r.Method, apipath.Sent(r.URL), p.extra, p.apis) // by path alone, whatever the method
	rt, err := p.routes.Get(api, func() (providers.Route, error) {
		rt, err := p.buildRoute(api)
		rt.Uncatalogued = !known
		return rt, err
	})
	if err != nil {
		return providers.Route{}, err
	}
	if api == tokenAPI && !p.cfg.NoFailedTokenPenalty {
		// The secret's own scope, which a refused exchange penalises.
		rt.Scopes = append(rt.Scopes[:len(rt.Scopes):len(rt.Scopes)], p.tokenScope(r))
	}
	return p.withMembers(r, api, rt)
}

// withMembers adds an app message's per-member rules to its route.
func (p *preset) withMembers(r *http.Request, api string, rt providers.Route) (providers.Route, error) {
	if api != memberAPI || p.memberMinute.Limit() == 0 {
		return rt, nil
	}
	rules, err := p.memberRules(r)
	if err != nil {
		return providers.Route{}, err
	}
	rt.Rules = append(rt.Rules[:len(rt.Rules):len(rt.Rules)], rules...)
	return rt, nil
}

func (p *preset) buildRoute(api string) (providers.Route, error) {
	rules := make([]rule.Rule, len(p.templates), len(p.templates)+1)
	for i, t := range p.templates {
		rl, err := t.WithKey(scopekind.Fit(p.prefixes[i], api))
		if err != nil {
			return providers.Route{}, err
		}
		rules[i] = rl
	}
	if p.inFlight != nil {
		rl, err := p.inFlight.WithKey(scopekind.Fit("inflight:"+p.cfg.CorpID+":", api))
		if err != nil {
			return providers.Route{}, err
		}
		rules = append(rules, rl)
	}
	return providers.Route{API: api, Rules: rules[:len(rules):len(rules)], Scopes: []string{p.apiScope(api)}}, nil
}

// apiScope is the penalty scope of one API of the company.
func (p *preset) apiScope(api string) string {
	return scopekind.Of(scopekind.API, scopekind.Fit(p.cfg.CorpID+":", api))
}

// scaled is a window's length under TimeScale.
func (c *settings) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.TimeScale)
}
