package wechat

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/internal/hostcheck"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/routecache"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// apiCatalog is WeChat's API catalog, built on first use.
var apiCatalog = sync.OnceValue(func() *catalog.Catalog { return catalog.MustNew(catalogTemplates...) })

// Name is the profile's name and limiter group.
const Name = "wechat"

// defaultHosts are the hosts of the WeChat server API.
var defaultHosts = []string{
	"api.weixin.qq.com", "api2.weixin.qq.com",
	"sh.api.weixin.qq.com", "sz.api.weixin.qq.com", "hk.api.weixin.qq.com",
}

// defaultDaily returns the documented daily quotas of a new account, by API
// path. Real quotas vary by account; /cgi-bin/openapi/quota/get tells yours.
func defaultDaily() map[string]int {
	return map[string]int{
		"/cgi-bin/token":                2000,
		"/cgi-bin/stable_token":         500000,
		"/cgi-bin/menu/create":          1000,
		"/cgi-bin/message/custom/send":  500000,
		"/cgi-bin/message/mass/sendall": 100,
		"/cgi-bin/user/info":            5000000,
		"/cgi-bin/qrcode/create":        100000,
	}
}

// defaultPerMinute returns the documented per-minute limits, by API path.
func defaultPerMinute() map[string]int {
	return map[string]int{"/cgi-bin/stable_token": 10000}
}

// Config describes a deployment's WeChat accounts: what they share (hosts,
// jitter, clock) and, in Apps, each account's quotas. Pass it to New. Zero
// fields take the defaults each states.
type Config struct {
	// Apps are the accounts (AppIDs), each with its own quotas. One
	// account is a list of one.
	Apps []App
	// Default is the AppID a request of an unknown account is charged to.
	// Empty: the one account when Apps lists one, else a shared scope
	// "unknown" with Unknown's quotas.
	Default string
	// Unknown holds the quotas of the accounts Apps does not list: the
	// shared scope of requests of unknown accounts (when Default is empty),
	// and each AppID learned from a token but not listed (unless
	// Unlisted). Zero fields take App's defaults, a new account's quotas
	// (the lowest WeChat grants); its AppID must be empty.
	Unknown App
	// Unlisted treats a learned AppID not in Apps as unknown; false (the
	// default) gives it Unknown's quotas under its own AppID.
	Unlisted bool

	// Hosts the preset handles (default api.weixin.qq.com, api2, and the
	// sh., sz. and hk. regional hosts). Matching ignores case; an entry without a port matches any port (see
	// providers.MatchHosts).
	Hosts []string
	// Jitter widens the per-minute windows: a rule keeps at most the limit
	// in any window of one minute plus Jitter, so that latency varying by
	// up to Jitter cannot crowd one of WeChat's minutes (default 50ms).
	// NoJitter: none.
	Jitter   time.Duration
	NoJitter bool
	// TimeScale divides the length of every minute and hour window (default
	// 1), for tests against an emulator that runs that much faster than the
	// wall clock. Never set it against the real platform.
	TimeScale float64
	// DayGrace starts each day's quota this late, and ends a 45009 penalty
	// this long after midnight, since our clock and WeChat's differ
	// (default 5s; must be under a minute). NoDayGrace: none. The grace
	// names each day's count in Redis: change it on every replica at once,
	// at the start of a day, or the day's count starts again from 0.
	DayGrace   time.Duration
	NoDayGrace bool
	// DefaultPenalty applies to quota errors whose end is not implied
	// (default providers.DefaultPenalty).
	DefaultPenalty time.Duration
	// Clock is the time source of Classify (default time.Now).
	Clock func() time.Time

	// Reconcile reads each account's quota of every daily-quota API it
	// calls from WeChat's /cgi-bin/openapi/quota/get, in the background
	// soon after the first call and then every ReconcileEvery, one replica
	// of the fleet at a time, and applies it to every replica: the daily
	// limit WeChat grants (raised or lowered: WeChat is the authority on
	// it, unlike the defaults or Daily) and the day's count, which includes
	// the calls of other systems using the same AppID (never lowering what
	// the fleet booked). It is off by default because it costs what you
	// did not ask for: each reading spends a call of quota/get's own daily
	// quota (QuotaGetDaily, kept by its own rule) with the access token the
	// account's last request carried (held in memory, never logged or
	// stored). Turn it on when another system calls with the same AppID,
	// or when WeChat granted your account quotas other than a new
	// account's. The counts need the shared limiter (throttle.WithRedis).
	Reconcile bool
	// ReconcileEvery is how often one account's API is read again
	// (default 15 minutes; at least a second).
	ReconcileEvery time.Duration
	// QuotaGetDaily is the daily quota of /cgi-bin/openapi/quota/get
	// itself that Reconcile keeps within, for accounts whose Daily does not
	// list that path (default 1,000; WeChat publishes no figure).
	QuotaGetDaily int
}

// App describes one WeChat account of a Config.
type App struct {
	// AppID identifies the account; required (the token does not say it).
	AppID string
	// Daily is each API's daily quota, by path, over the defaults (a new
	// account's, e.g. 2,000 for /cgi-bin/token;
	// /cgi-bin/openapi/quota/get tells yours): a path listed sets that
	// API's quota, and the other defaults stay.
	Daily map[string]int
	// PerMinute is each API's per-minute limit, by path, over the defaults
	// (10,000 for /cgi-bin/stable_token) like Daily.
	PerMinute map[string]int
	// NoDefaultQuotas leaves out the defaults: Daily and PerMinute then
	// hold every quota of the account, and ForceRefreshDaily counts only
	// when set. (A map given used to replace the defaults, so that raising
	// one API's quota dropped the others, the token exchange's 2,000 a day
	// among them.)
	NoDefaultQuotas bool
	// ForceRefreshDaily is how many /cgi-bin/stable_token exchanges with
	// force_refresh the account may make a day (default 20, WeChat's
	// figure), beside the exchange's own quotas. WeChat's other condition,
	// at least 30 s between forced refreshes, is not a wait the preset
	// imposes: a forced refresh sooner returns the token in force without
	// a new one, which is what the replicas that saw it refused after one
	// of them refreshed need.
	ForceRefreshDaily int
}

// settings is one account's Config and App together: what a profile is
// built from, with the defaults filled in.
type settings struct {
	Config
	App
}

func (c *Config) merge(a App) settings { return settings{Config: *c, App: a} }

// Defaults of Config's durations and counts.
const (
	defaultJitter         = 50 * time.Millisecond
	defaultDayGrace       = 5 * time.Second
	defaultReconcileEvery = 15 * time.Minute
	defaultQuotaGetDaily  = 1000
	defaultForceRefreshes = 20
)

// stableTokenPath is the exchange whose forced refreshes ForceRefreshDaily
// counts.
const stableTokenPath = "/cgi-bin/stable_token"

// maxAppID bounds App.AppID so that keys and scopes stay within
// rule.MaxKeyLen whatever the path (AppIDs are 18 bytes).
const maxAppID = 64

func (c *settings) setDefaults() {
	if c.Hosts == nil {
		c.Hosts = defaultHosts
	}
	if !c.NoDefaultQuotas {
		// The defaults (maps of their own) with the entries given over
		// them: the caller's maps are never changed.
		daily, perMinute := defaultDaily(), defaultPerMinute()
		maps.Copy(daily, c.Daily)
		maps.Copy(perMinute, c.PerMinute)
		c.Daily, c.PerMinute = daily, perMinute
		c.ForceRefreshDaily = cmp.Or(c.ForceRefreshDaily, defaultForceRefreshes)
	}
	// Values given and turned off: off wins, as in every preset.
	if c.NoJitter && c.Jitter >= 0 { // a negative one stays, refused below
		c.Jitter = 0
	} else {
		c.Jitter = cmp.Or(c.Jitter, defaultJitter)
	}
	c.TimeScale = cmp.Or(c.TimeScale, 1)
	if c.NoDayGrace && c.DayGrace >= 0 { // a negative one stays, refused below
		c.DayGrace = 0
	} else {
		c.DayGrace = cmp.Or(c.DayGrace, defaultDayGrace)
	}
	c.DefaultPenalty = cmp.Or(c.DefaultPenalty, providers.DefaultPenalty)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	c.ReconcileEvery = cmp.Or(c.ReconcileEvery, defaultReconcileEvery)
	c.QuotaGetDaily = cmp.Or(c.QuotaGetDaily, defaultQuotaGetDaily)
	if _, listed := c.Daily[quotaGetPath]; c.Reconcile && !listed {
		// The readings' own quota: a copy, so a caller's map is not changed.
		d := make(map[string]int, len(c.Daily)+1)
		maps.Copy(d, c.Daily)
		d[quotaGetPath] = c.QuotaGetDaily
		c.Daily = d
	}
}

func (c *settings) validate() error {
	switch {
	case c.AppID == "" || len(c.AppID) > maxAppID || strings.ContainsAny(c.AppID, ": \t\r\n"):
		return fmt.Errorf("wechat: App.AppID must be 1..%d bytes without ':' or spaces, got %q", maxAppID, c.AppID)
	case !(c.TimeScale >= 1) || math.IsInf(c.TimeScale, 1):
		return fmt.Errorf("wechat: Config.TimeScale must be a finite number of at least 1, got %v", c.TimeScale)
	case c.Jitter < 0 || c.Jitter > time.Minute:
		return fmt.Errorf("wechat: Config.Jitter must be within (0, 1m] (NoJitter: none), got %v", c.Jitter)
	case c.DayGrace < 0 || c.DayGrace >= time.Minute:
		return fmt.Errorf("wechat: Config.DayGrace must be within (0, 1m) (NoDayGrace: none), got %v", c.DayGrace)
	case c.DefaultPenalty < 0:
		return fmt.Errorf("wechat: Config.DefaultPenalty must not be negative, got %v", c.DefaultPenalty)
	case c.ReconcileEvery < time.Second:
		return fmt.Errorf("wechat: Config.ReconcileEvery must be at least 1s, got %v", c.ReconcileEvery)
	case c.QuotaGetDaily < 1:
		return fmt.Errorf("wechat: Config.QuotaGetDaily must be at least 1, got %d", c.QuotaGetDaily)
	case c.ForceRefreshDaily < 0:
		return fmt.Errorf("wechat: App.ForceRefreshDaily must not be negative, got %d", c.ForceRefreshDaily)
	}
	if err := hostcheck.All("Config.Hosts", Name, c.Hosts); err != nil {
		return fmt.Errorf("wechat: %w", err)
	}
	for field, m := range map[string]map[string]int{"Daily": c.Daily, "PerMinute": c.PerMinute} {
		for path, n := range m {
			// A request's path is read with "." and ".." resolved and
			// unescaped: a key written otherwise would limit nothing.
			if err := catalog.CheckPath(path); err != nil {
				return fmt.Errorf("wechat: App.%s[%q]: the key must be an API path such as /cgi-bin/user/info; it %v", field, path, err)
			}
			if _, err := catalog.New(path); err != nil || strings.ContainsAny(path, "{}: ") || path != "/" && strings.HasSuffix(path, "/") {
				return fmt.Errorf("wechat: App.%s[%q]: the key must be an API path such as /cgi-bin/user/info", field, path)
			}
			if n < 1 {
				return fmt.Errorf("wechat: App.%s[%q] must be at least 1, got %d (remove the key for no limit)", field, path, n)
			}
		}
	}
	return nil
}

// profileOf builds one account's profile, or reports the field at fault.
func profileOf(cfg settings) (providers.Profile, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return providers.Profile{}, err
	}
	p := &preset{cfg: cfg, hosts: providers.MatchHosts(cfg.Hosts...), base: map[string][]rule.Rule{}, apis: apiCatalog()}
	// Listed paths the catalog does not know are APIs too.
	var extra []string
	for _, m := range []map[string]int{cfg.Daily, cfg.PerMinute} {
		for path := range m {
			if a := p.apis.Lookup(http.MethodPost, path); (a == nil || a.Name != path) && !slices.Contains(extra, path) {
				extra = append(extra, path)
			}
		}
	}
	p.extra = catalog.MustNew(extra...)
	// The AppID and the listed paths are all known now, so every rule is
	// built once here: Route then allocates nothing for its rules.
	for path, n := range cfg.Daily {
		r, err := rule.NewCalendar(key("day", cfg.AppID, path), n, rule.Day, penaltytime.Beijing(),
			rule.WithGrace(cfg.DayGrace))
		if err != nil {
			return providers.Profile{}, fmt.Errorf("wechat: App.Daily[%q]: %w", path, err)
		}
		p.base[path] = append(p.base[path], r)
	}
	for path, n := range cfg.PerMinute {
		// A sliding window, not calendar minutes: a calendar minute would
		// need our clock to agree with WeChat's to the millisecond, while
		// "n in any minute plus Jitter" keeps every one of WeChat's minutes
		// within n whatever the offset and the latency, and still lets a
		// batch that fits the minute go at once.
		minute := time.Duration(float64(time.Minute) / cfg.TimeScale)
		r, err := rule.NewWindow(key("min", cfg.AppID, path), n, minute+cfg.Jitter)
		if err != nil {
			return providers.Profile{}, fmt.Errorf("wechat: App.PerMinute[%q]: %w", path, err)
		}
		p.base[path] = append(p.base[path], r)
	}
	if cfg.ForceRefreshDaily > 0 {
		r, err := rule.NewCalendar(key("force", cfg.AppID, stableTokenPath), cfg.ForceRefreshDaily, rule.Day, penaltytime.Beijing(),
			rule.WithGrace(cfg.DayGrace))
		if err != nil {
			return providers.Profile{}, fmt.Errorf("wechat: App.ForceRefreshDaily: %w", err)
		}
		p.forced = []rule.Rule{r}
	}
	p.state.Store(&rules{byAPI: p.base})
	return providers.Profile{
		Name:           Name,
		Match:          p.match,
		Route:          p.route,
		Classify:       p.classify,
		DefaultPenalty: cfg.DefaultPenalty,
		Lower:          p.lower,
	}, nil
}

type preset struct {
	cfg   settings
	hosts func(*http.Request) bool
	base  map[string][]rule.Rule // by API path, as configured; read-only after Profile
	state atomic.Pointer[rules]  // the rules in force: base, or with reconciled daily limits
	apis  *catalog.Catalog       // WeChat's APIs
	extra *catalog.Catalog       // listed paths apis lacks, searched first
	// forced is ForceRefreshDaily's rule, booked beside stable_token's own
	// by an exchange with force_refresh; empty: none.
	forced []rule.Rule
	resetScopes
}

// rules are the rules in force and the routes built from them, replaced
// whole when a reconciled limit changes one (reconcile.go).
type rules struct {
	byAPI  map[string][]rule.Rule // read-only
	until  map[string]time.Time   // when each reconciled limit lapses, by API; read-only
	routes routecache.Cache       // by API name
}

func (p *preset) match(r *http.Request) bool {
	return p.hosts(r)
}

// route names the request's API by the catalogs. Routes are built once per
// API and shared: their slices must not be modified.
func (p *preset) route(r *http.Request) (providers.Route, error) {
	api, known := catalog.Find(r.Method, apipath.Sent(r.URL), p.extra, p.apis) // by path alone, whatever the method
	st := p.state.Load()
	if len(st.until) > 0 {
		st = p.lapse(st, api)
	}
	name := api
	if api == stableTokenPath && len(p.forced) > 0 && forcesRefresh(r) {
		name = forcedRoute
	}
	return st.routes.Get(name, func() (providers.Route, error) {
		rules, scopes := st.byAPI[api], []string{p.apiScope(api)}
		if name == forcedRoute {
			rules = append(slices.Clip(rules), p.forced...)
			scopes = append(scopes, p.apiScope(forcedRoute))
		}
		return providers.Route{API: api, Uncatalogued: !known, Rules: rules, Scopes: scopes}, nil
	})
}

// forcedRoute names, in the route cache, stable_token's route with the
// forced refreshes' rule, and the API of their penalty scope: a 45009 to a
// forced refresh stops forced refreshes until midnight, while exchanges that
// force nothing, which WeChat still answers, go on.
const forcedRoute = stableTokenPath + " force_refresh"

// forcesRefresh reports whether a stable_token exchange asks for a new
// token: {"force_refresh": true} in a JSON body of a few hundred bytes. A
// body that cannot be read whole or parsed reads as not forcing: WeChat
// would not parse it either.
func forcesRefresh(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	body, complete := providers.PeekRequestBody(r, maxStableTokenBody)
	return complete && bytes.Contains(body, []byte("force_refresh")) && exchanges.ParseRequest(body).ForceRefresh
}

// maxStableTokenBody bounds what forcesRefresh reads: the request holds a
// grant type, an AppID, a secret and the flag.
const maxStableTokenBody = 4 << 10

// apiScope is the penalty scope of one API of the account. Catalog names
// are short and validate bounds the AppID and listed paths, so it fits
// rule.MaxKeyLen.
func (p *preset) apiScope(api string) string {
	return scopekind.Of(scopekind.API, p.cfg.AppID+":"+api)
}

func key(kind, app, api string) string { return kind + ":" + app + ":" + api }
