package feishu

import (
	"cmp"
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
)

// apiCatalog is Feishu's API catalog, built on first use.
var apiCatalog = sync.OnceValue(func() *catalog.Catalog { return catalog.MustNew(catalogTemplates...) })

// Name is the profile's name and limiter group.
const Name = "feishu"

// defaultHosts are the hosts of the Feishu and Lark open platforms.
var defaultHosts = []string{"open.feishu.cn", "open.larksuite.com"}

// IMSend is the API that sends an IM message, which also carries the
// per-chat limit.
const IMSend = "POST /open-apis/im/v1/messages"

// Level is one row of Feishu's frequency level table. Zero means no cap.
type Level struct {
	// PerSecond and PerMinute are the level's two caps, per app and API
	// (0: that cap does not apply).
	PerSecond, PerMinute int
}

// LevelTable returns Feishu's documented levels for the standard edition
// (level 10 is 100/s on the business edition: see App.Business).
func LevelTable() map[int]Level {
	return map[int]Level{
		1: {PerMinute: 10}, 2: {PerMinute: 20}, 3: {PerMinute: 100},
		4: {PerSecond: 50, PerMinute: 1000}, 5: {PerSecond: 1}, 6: {PerSecond: 5},
		7: {PerSecond: 10}, 8: {PerSecond: 20}, 9: {PerSecond: 50},
		10: {PerSecond: 50}, 11: {PerSecond: 100}, 21: {PerSecond: 3},
	}
}

// defaultAPIs returns the levels of the APIs the preset knows, written
// "METHOD /open-apis/path" with ":name" for a path parameter.
func defaultAPIs() map[string]int {
	return map[string]int{
		IMSend: 4, // 1000/min and 50/s, plus 5/s per chat or user
		"POST /open-apis/im/v1/messages/:message_id/reply": 4,
	}
}

// Defaults of Config's and App's fields, each stated in its field's doc
// comment.
const (
	defaultLevel         = 4 // the most common level; an assumption, set yours
	defaultPerChat       = 5
	defaultMonthlyQuota  = 10000
	defaultJitter        = 50 * time.Millisecond
	defaultMonthGrace    = 5 * time.Second
	defaultShortPenalty  = time.Second
	defaultChatPeekLimit = 1 << 20
)

// profileOf builds one app's profile, or reports the field at fault.
func profileOf(cfg settings) (providers.Profile, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return providers.Profile{}, err
	}
	p := &preset{cfg: cfg, hosts: providers.MatchHosts(cfg.Hosts...), apis: apiCatalog(), listed: map[string][]rule.Rule{}}
	var err error
	// The listed APIs and the AppID are known now: their rules are built
	// once. Other APIs re-key the default level's templates, once per API.
	var extra []string
	for name, n := range cfg.APIs {
		rules, _, err := p.levelRules(cfg.Levels[n], name)
		if err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: App.APIs[%q]: %w", name, err)
		}
		p.listed[name] = rules
		method, path, _ := strings.Cut(name, " ")
		if a := p.apis.Lookup(method, path); a == nil || a.Name != name {
			extra = append(extra, name) // an API the catalog lacks, or names otherwise
		}
	}
	slices.Sort(extra)
	if p.extra, err = catalog.New(extra...); err != nil {
		return providers.Profile{}, fmt.Errorf("feishu: App.APIs: %w", err)
	}
	if !cfg.NoDefaultLevel {
		if p.defaults, p.defaultPrefixes, err = p.levelRules(cfg.Levels[cfg.DefaultLevel], "template"); err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: App.DefaultLevel: %w", err)
		}
	}
	if !cfg.NoPerChat {
		// One recipient among the many that share the app's IM rules: a
		// message held back by its chat waits for the chat's slot without
		// booking the shared rules more than chatBookAhead ahead, so other
		// chats are not held behind it.
		if p.chat, err = rule.New("template", cfg.PerChat, time.Second+cfg.Jitter, rule.WithMaxBookAhead(chatBookAhead)); err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: App.PerChat: %w", err)
		}
	}
	if cfg.FreeEdition {
		tenant := tenantOf(&cfg.App)
		r, err := rule.NewCalendar("month:"+tenant, cfg.MonthlyQuota, rule.Month, penaltytime.Beijing(),
			rule.WithGrace(cfg.MonthGrace))
		if err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: App.MonthlyQuota: %w", err)
		}
		p.month = []rule.Rule{r}
		p.monthScope = scopekind.Of(scopekind.Monthly, tenant)
	}
	p.appScope = scopekind.Of(scopekind.App, cfg.AppID)
	p.chatScopePrefix = p.chatScope("")
	p.messages = cfg.memory
	if p.messages == nil {
		p.messages = newMessageChats(messageMemory)
	}
	p.learned = &learnedLimits{}
	p.entities = entityhash.New(cfg.EntityKey, cfg.AppID)
	prof := providers.Profile{
		Name:           Name,
		Match:          p.match,
		Route:          p.route,
		Classify:       p.classify,
		Lower:          p.lower,
		DefaultPenalty: cfg.DefaultPenalty,
	}
	return prof, nil
}

type preset struct {
	cfg      settings
	hosts    func(*http.Request) bool
	apis     *catalog.Catalog       // Feishu's APIs
	extra    *catalog.Catalog       // App.APIs the catalog lacks, searched first
	listed   map[string][]rule.Rule // rules of App.APIs, by name; read-only after Profile
	routes   routecache.Cache       // by API name, without the chat
	learned  *learnedLimits         // levels learned from 99991400s (learned.go)
	defaults []rule.Rule            // templates of defaultLevel; nil for none
	// defaultPrefixes start the keys of defaults, one per template.
	defaultPrefixes []string
	chat            rule.Rule     // template of PerChat; zero when disabled
	chatScopePrefix string        // chatScope("") : the scope of a chat less its key
	messages        *messageChats // the chats of the messages seen in answers (the Preset's, every app's)
	month           []rule.Rule   // the monthly quota, when FreeEdition
	monthScope      string        // its penalty scope, the tenant's; "" when not FreeEdition
	entities        *entityhash.Hasher
	appScope        string
}

// levelRules builds a level's rules under keys "s:<app>:<name>" (per
// second) and "m:<app>:<name>" (per minute), and returns the keys'
// prefixes, for templates.
func (p *preset) levelRules(l Level, name string) (rules []rule.Rule, prefixes []string, err error) {
	for _, w := range []struct {
		prefix string
		n      int
		period time.Duration
	}{{"s:", l.PerSecond, time.Second}, {"m:", l.PerMinute, time.Minute}} {
		if w.n <= 0 {
			continue
		}
		prefix := w.prefix + p.cfg.AppID + ":"
		// Per second: paced, so latency jitter cannot crowd one of Feishu's
		// seconds; it also spreads a burst. Per minute: a sliding window,
		// which lets a burst go at once while the minute has room.
		var r rule.Rule
		if w.period >= time.Minute {
			r, err = rule.NewWindow(scopekind.Fit(prefix, name), w.n, w.period+p.cfg.Jitter)
		} else {
			r, err = rule.New(scopekind.Fit(prefix, name), w.n, w.period+p.cfg.Jitter)
		}
		if err != nil {
			return nil, nil, err
		}
		rules, prefixes = append(rules, r), append(prefixes, prefix)
	}
	return rules, prefixes, nil
}

// match takes the requests to the open platform's APIs on the preset's
// hosts: their paths start with /open-apis/, after any repeated leading
// slashes, which Feishu's front end merges as every provider's does (the
// catalog reads "//open-apis/..." as "/open-apis/..."; matched only as
// written, such a request went out with no limit at all). The path is the
// one net/http sends, as the catalog reads it (apipath.Sent): a URL with
// Opaque "//open.feishu.cn/open-apis/..." has no Path, and matched by Path
// went out unlimited too.
func (p *preset) match(r *http.Request) bool {
	return r.URL != nil && strings.HasPrefix(strings.TrimLeft(apipath.Clean(apipath.Sent(r.URL)), "/"), "open-apis/") && p.hosts(r)
}

// apiOf returns the API a request calls, or "METHOD uncatalogued" and
// false.
func (p *preset) apiOf(r *http.Request) (string, bool) {
	if name, known := catalog.Find(r.Method, apipath.Sent(r.URL), p.extra, p.apis); known {
		return name, true
	}
	return uncatalogued(r.Method), false
}

// uncatalogued names the stand-in API of the paths the catalog lacks: one
// per method, as Feishu's catalog names every API with its method.
func uncatalogued(method string) string {
	switch method {
	case http.MethodGet:
		return "GET " + catalog.Uncatalogued
	case http.MethodPost:
		return "POST " + catalog.Uncatalogued
	case http.MethodPut:
		return "PUT " + catalog.Uncatalogued
	case http.MethodPatch:
		return "PATCH " + catalog.Uncatalogued
	case http.MethodDelete:
		return "DELETE " + catalog.Uncatalogued
	}
	return catalog.Uncatalogued
}

// route names the request's API by the catalogs, and adds the recipient's
// rule and scope to a message send. Routes are built once per API and
// shared: their slices must not be modified.
func (p *preset) route(r *http.Request) (providers.Route, error) {
	name, known := p.apiOf(r)
	rt, lowered := p.learnedRoute(name)
	if lowered {
		rt.Uncatalogued = !known
	} else {
		var err error
		rt, err = p.routes.Get(name, func() (providers.Route, error) {
			built, err := p.buildRoute(name)
			built.Uncatalogued = !known
			return built, err
		})
		if err != nil {
			return providers.Route{}, err
		}
	}
	for _, chat := range p.chatsOf(name, r) {
		rl, err := p.chat.WithKey("chat:" + p.cfg.AppID + ":" + chat)
		if err != nil {
			return providers.Route{}, err
		}
		rt.Rules = append(rt.Rules[:len(rt.Rules):len(rt.Rules)], rl)
		rt.Scopes = append(rt.Scopes[:len(rt.Scopes):len(rt.Scopes)], p.chatScope(chat))
	}
	return rt, nil
}

// buildRoute builds the route of one API, without a recipient.
func (p *preset) buildRoute(name string) (providers.Route, error) {
	rules, ok := p.listed[name]
	if !ok {
		for i, t := range p.defaults {
			rl, err := t.WithKey(scopekind.Fit(p.defaultPrefixes[i], name))
			if err != nil {
				return providers.Route{}, err
			}
			rules = append(rules, rl)
		}
	}
	rules = append(rules[:len(rules):len(rules)], p.month...)
	return providers.Route{API: name, Rules: rules[:len(rules):len(rules)], Scopes: p.scopes(name)}, nil
}

// scopes are the penalty scopes of one API of the app: the API, the app,
// and the tenant's monthly quota on the free edition.
func (p *preset) scopes(name string) []string {
	if p.monthScope != "" {
		return []string{p.apiScope(name), p.appScope, p.monthScope}
	}
	return []string{p.apiScope(name), p.appScope}
}

// ownTenant names the deployment's own tenant, whose monthly quota its
// internal apps share unless App.Tenant names another.
const ownTenant = "own"

// tenantOf is the tenant whose monthly quota a's calls count against: a
// store app's tenant (its AppID is "<app_id>@<tenant_key>" once learned),
// else App.Tenant, else the deployment's own.
func tenantOf(a *App) string {
	if i := strings.LastIndexByte(a.AppID, '@'); i >= 0 {
		return a.AppID[i+1:]
	}
	return cmp.Or(a.Tenant, ownTenant)
}

func (p *preset) apiScope(name string) string {
	return scopekind.Of(scopekind.API, scopekind.Fit(p.cfg.AppID+":", name))
}

// chatScope is the penalty scope of one recipient of the app's messages.
func (p *preset) chatScope(chat string) string {
	return scopekind.Of(scopekind.Entity, p.cfg.AppID+":chat#"+chat)
}
