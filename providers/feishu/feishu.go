// Package feishu is the preset profile for the Feishu / Lark open platform
// (open.feishu.cn and open.larksuite.com, paths /open-apis/...).
//
// Feishu limits each API per app by a frequency level: a per-second cap, a
// per-minute cap, or both (level 4: 1000/min and 50/s). Each API's page states
// its level, so the profile holds a table of API patterns and levels, with a
// default level for the rest. Sending IM messages adds 5/s to one chat or
// user. The free edition also caps a tenant's calls per calendar month.
//
// Throttled calls answer HTTP 429 (some old APIs 400) with code 99991400 and
// the x-ogw-ratelimit-reset header, the seconds to wait; the monthly quota
// answers 429 too, with 99991403, and lasts until the 1st of next month: the
// status alone never means "retry soon", so Classify reads the code.
package feishu

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// Name is the profile's name and limiter group.
const Name = "feishu"

// DefaultHosts are the hosts of the Feishu and Lark open platforms.
var DefaultHosts = []string{"open.feishu.cn", "open.larksuite.com"}

// IMSend is the API that sends an IM message, which also carries the
// per-chat limit.
const IMSend = "POST /open-apis/im/v1/messages"

// Level is one row of Feishu's frequency level table. Zero means no cap.
type Level struct {
	PerSecond, PerMinute int
}

// LevelTable returns Feishu's documented levels for the standard edition
// (level 10 is 100/s on the business edition: see Config.Business).
func LevelTable() map[int]Level {
	return map[int]Level{
		1: {PerMinute: 10}, 2: {PerMinute: 20}, 3: {PerMinute: 100},
		4: {PerSecond: 50, PerMinute: 1000}, 5: {PerSecond: 1}, 6: {PerSecond: 5},
		7: {PerSecond: 10}, 8: {PerSecond: 20}, 9: {PerSecond: 50},
		10: {PerSecond: 50}, 11: {PerSecond: 100}, 21: {PerSecond: 3},
	}
}

// DefaultAPIs returns the levels of the APIs the preset knows, written
// "METHOD /open-apis/path" with ":name" for a path parameter.
func DefaultAPIs() map[string]int {
	return map[string]int{
		IMSend: 4, // 1000/min and 50/s, plus 5/s per chat or user
		"POST /open-apis/im/v1/messages/:message_id/reply": 4,
	}
}

// Defaults of Config's fields.
const (
	DefaultLevel        = 4 // the most common level; an assumption, set yours
	DefaultPerChat      = 5
	DefaultMonthlyQuota = 10000
	DefaultJitter       = 50 * time.Millisecond
	DefaultMonthGrace   = 5 * time.Second
	DefaultShortPenalty = time.Second
)

// Config configures the preset. Zero fields take the documented defaults.
type Config struct {
	// AppID identifies the app (cli_...); required. Limits are per app, and
	// the token does not say which app it belongs to.
	AppID string
	// Hosts the profile handles (default DefaultHosts); only paths under
	// /open-apis/ match.
	Hosts []string
	// Levels is the level table (default LevelTable()); a non-nil map
	// replaces it.
	Levels map[int]Level
	// Business raises level 10 to 100/s when Levels is nil.
	Business bool
	// APIs maps API patterns to levels (default DefaultAPIs()); a non-nil
	// map replaces the defaults.
	APIs map[string]int
	// DefaultLevel applies to APIs not in APIs (default 4); -1 gives them no
	// rule, only a penalty scope.
	DefaultLevel int
	// PerChat caps IM messages per second to one receive_id (default 5);
	// -1 disables the rule. It applies only when the request names the
	// receive_id in its query: Route never reads the body, where Feishu's
	// API usually takes it.
	PerChat int
	// FreeEdition enforces MonthlyQuota per calendar month in Beijing.
	FreeEdition bool
	// MonthlyQuota is the tenant's calls per month on the free edition
	// (default 10,000).
	MonthlyQuota int
	// MonthGrace starts each month's quota, and ends a 99991403 penalty,
	// this long after midnight on the 1st (default 5s, under a minute).
	MonthGrace time.Duration
	// ShortPenalty is how long the other rate-limit codes (1000004,
	// 230020, ...) penalise their scope when no reset header says (default 1s).
	ShortPenalty time.Duration
	// Jitter widens every window: a rule keeps at most its limit in any
	// window of its period plus Jitter, so that latency varying by up to
	// Jitter cannot crowd one of Feishu's fixed windows (default 50ms).
	Jitter time.Duration
	// DefaultPenalty applies to quota errors whose end is not implied
	// (default providers.DefaultPenalty).
	DefaultPenalty time.Duration
	// Clock is the time source of Classify (default time.Now).
	Clock func() time.Time
}

const maxAppID = 64

func (c *Config) setDefaults() {
	if c.Hosts == nil {
		c.Hosts = DefaultHosts
	}
	if c.Levels == nil {
		c.Levels = LevelTable()
		if c.Business {
			c.Levels[10] = Level{PerSecond: 100}
		}
	}
	if c.APIs == nil {
		c.APIs = DefaultAPIs()
	}
	c.DefaultLevel = cmp.Or(c.DefaultLevel, DefaultLevel)
	c.PerChat = cmp.Or(c.PerChat, DefaultPerChat)
	c.MonthlyQuota = cmp.Or(c.MonthlyQuota, DefaultMonthlyQuota)
	c.MonthGrace = cmp.Or(c.MonthGrace, DefaultMonthGrace)
	c.ShortPenalty = cmp.Or(c.ShortPenalty, DefaultShortPenalty)
	c.Jitter = cmp.Or(c.Jitter, DefaultJitter)
	c.DefaultPenalty = cmp.Or(c.DefaultPenalty, providers.DefaultPenalty)
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

func (c *Config) validate() error {
	switch {
	case c.AppID == "" || len(c.AppID) > maxAppID || strings.ContainsAny(c.AppID, ": \t\r\n"):
		return fmt.Errorf("feishu: Config.AppID must be 1..%d bytes without ':' or spaces, got %q", maxAppID, c.AppID)
	case len(c.Hosts) == 0:
		return fmt.Errorf("feishu: Config.Hosts must not be empty")
	case c.DefaultLevel != -1 && !c.hasLevel(c.DefaultLevel):
		return fmt.Errorf("feishu: Config.DefaultLevel %d is not in Config.Levels (use -1 for none)", c.DefaultLevel)
	case c.PerChat < -1:
		return fmt.Errorf("feishu: Config.PerChat must be positive, or -1 to disable, got %d", c.PerChat)
	case c.MonthlyQuota < 1:
		return fmt.Errorf("feishu: Config.MonthlyQuota must be at least 1, got %d", c.MonthlyQuota)
	case c.MonthGrace < 0 || c.MonthGrace >= time.Minute:
		return fmt.Errorf("feishu: Config.MonthGrace must be within [0, 1m), got %v", c.MonthGrace)
	case c.ShortPenalty < 0:
		return fmt.Errorf("feishu: Config.ShortPenalty must not be negative, got %v", c.ShortPenalty)
	case c.Jitter < 0 || c.Jitter > time.Second:
		return fmt.Errorf("feishu: Config.Jitter must be within [0, 1s], got %v", c.Jitter)
	case c.DefaultPenalty < 0:
		return fmt.Errorf("feishu: Config.DefaultPenalty must not be negative, got %v", c.DefaultPenalty)
	}
	for i, h := range c.Hosts {
		if h == "" {
			return fmt.Errorf("feishu: Config.Hosts[%d] must not be empty", i)
		}
	}
	for n, l := range c.Levels {
		if l.PerSecond < 0 || l.PerMinute < 0 || l == (Level{}) {
			return fmt.Errorf("feishu: Config.Levels[%d] must have a positive PerSecond or PerMinute and no negative one, got %+v", n, l)
		}
	}
	for name, n := range c.APIs {
		method, path, ok := strings.Cut(name, " ")
		if !ok || method == "" || strings.ToUpper(method) != method || !strings.HasPrefix(path, "/open-apis/") ||
			strings.ContainsAny(path, " ?#") || len(name) > providers.MaxAPILen {
			return fmt.Errorf("feishu: Config.APIs[%q]: the key must read \"METHOD /open-apis/...\" (at most %d bytes)", name, providers.MaxAPILen)
		}
		if !c.hasLevel(n) {
			return fmt.Errorf("feishu: Config.APIs[%q]: level %d is not in Config.Levels", name, n)
		}
	}
	return nil
}

func (c *Config) hasLevel(n int) bool { _, ok := c.Levels[n]; return ok }

// Profile builds the Feishu profile, or reports the Config field at fault.
func Profile(cfg Config) (providers.Profile, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return providers.Profile{}, err
	}
	p := &preset{cfg: cfg, hosts: providers.NewHostSet(cfg.Hosts), byMethod: map[string][]*api{}}
	var err error
	// The listed APIs and the AppID are known now: their rules are built
	// once. Unlisted APIs re-key the default level's templates per request.
	for name, n := range cfg.APIs {
		a := &api{name: name}
		method, path, _ := strings.Cut(name, " ")
		a.segs = strings.Split(path, "/")
		for _, s := range a.segs {
			if strings.HasPrefix(s, ":") {
				a.params++
			}
		}
		if a.rules, _, err = p.levelRules(cfg.Levels[n], name); err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: Config.APIs[%q]: %w", name, err)
		}
		p.byMethod[method] = append(p.byMethod[method], a)
	}
	for _, as := range p.byMethod {
		// The pattern with the fewest parameters wins: a literal segment
		// says more than a placeholder.
		sort.Slice(as, func(i, j int) bool {
			if as[i].params != as[j].params {
				return as[i].params < as[j].params
			}
			return as[i].name < as[j].name
		})
	}
	if cfg.DefaultLevel != -1 {
		if p.defaults, p.defaultPrefixes, err = p.levelRules(cfg.Levels[cfg.DefaultLevel], "template"); err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: Config.DefaultLevel: %w", err)
		}
	}
	if cfg.PerChat > 0 {
		if p.chat, err = limiter.NewRule("template", cfg.PerChat, time.Second+cfg.Jitter); err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: Config.PerChat: %w", err)
		}
	}
	if cfg.FreeEdition {
		r, err := limiter.NewCalendarRule("month:"+cfg.AppID, cfg.MonthlyQuota, limiter.Month, providers.Beijing(),
			limiter.WithGrace(cfg.MonthGrace))
		if err != nil {
			return providers.Profile{}, fmt.Errorf("feishu: Config.MonthlyQuota: %w", err)
		}
		p.month = []limiter.Rule{r}
	}
	p.appScope = providers.Scope(providers.ScopeApp, cfg.AppID)
	return providers.Profile{
		Name:           Name,
		Match:          p.match,
		Route:          p.route,
		Classify:       p.classify,
		DefaultPenalty: cfg.DefaultPenalty,
	}, nil
}

// MustProfile is Profile for configs known to be valid; it panics on error.
func MustProfile(cfg Config) providers.Profile {
	return providers.Must(Profile(cfg))
}

type preset struct {
	cfg      Config
	hosts    providers.HostSet
	byMethod map[string][]*api // read-only after Profile
	defaults []limiter.Rule    // templates of DefaultLevel; nil for none
	// defaultPrefixes start the keys of defaults, one per template.
	defaultPrefixes []string
	chat            limiter.Rule   // template of PerChat; zero when disabled
	month           []limiter.Rule // the monthly quota, when FreeEdition
	appScope        string
}

// api is one listed API pattern and its rules, keyed already.
type api struct {
	name   string
	segs   []string
	params int
	rules  []limiter.Rule
}

// levelRules builds a level's rules under keys "s:<app>:<name>" (per
// second) and "m:<app>:<name>" (per minute), and returns the keys'
// prefixes, for templates.
func (p *preset) levelRules(l Level, name string) (rules []limiter.Rule, prefixes []string, err error) {
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
		var r limiter.Rule
		if w.period >= time.Minute {
			r, err = limiter.NewWindowRule(fit(prefix, name), w.n, w.period+p.cfg.Jitter)
		} else {
			r, err = limiter.NewRule(fit(prefix, name), w.n, w.period+p.cfg.Jitter)
		}
		if err != nil {
			return nil, nil, err
		}
		rules, prefixes = append(rules, r), append(prefixes, prefix)
	}
	return rules, prefixes, nil
}

func (p *preset) match(r *http.Request) bool {
	return r.URL != nil && strings.HasPrefix(r.URL.Path, "/open-apis/") && p.hosts.Match(r)
}

// lookup finds the listed API of a request, or nil.
func (p *preset) lookup(method, path string) *api {
	for _, a := range p.byMethod[method] {
		if a.matches(path) {
			return a
		}
	}
	return nil
}

func (a *api) matches(path string) bool {
	rest := path
	for i, seg := range a.segs {
		part, tail, more := strings.Cut(rest, "/")
		if more != (i < len(a.segs)-1) {
			return false // the path has more or fewer segments
		}
		if strings.HasPrefix(seg, ":") {
			if part == "" {
				return false
			}
		} else if part != seg {
			return false
		}
		rest = tail
	}
	return true
}

func (p *preset) route(r *http.Request) (providers.Route, error) {
	var name string
	var rules []limiter.Rule
	if a := p.lookup(r.Method, r.URL.Path); a != nil {
		name = a.name
		rules = a.rules
	} else {
		name = r.Method + " " + providers.FoldPath(r.URL.Path)
		for i, t := range p.defaults {
			rule, err := t.WithKey(fit(p.defaultPrefixes[i], name))
			if err != nil {
				return providers.Route{}, err
			}
			rules = append(rules, rule)
		}
	}
	scopes := []string{p.apiScope(name), p.appScope}
	if len(p.month) > 0 {
		rules = append(rules[:len(rules):len(rules)], p.month...)
	}
	if chat := p.chatOf(name, r); chat != "" {
		rule, err := p.chat.WithKey("chat:" + p.cfg.AppID + ":" + chat)
		if err != nil {
			return providers.Route{}, err
		}
		rules = append(rules[:len(rules):len(rules)], rule)
		scopes = append(scopes, p.chatScope(chat))
	}
	return providers.Route{API: name, Rules: rules, Scopes: scopes}, nil
}

// chatOf returns the hashed receive_id of an IM send that names it in the
// query, or "". Hashing bounds the key and keeps user IDs and emails out of
// Redis keys and telemetry.
func (p *preset) chatOf(name string, r *http.Request) string {
	if name != IMSend || p.cfg.PerChat <= 0 || !strings.Contains(r.URL.RawQuery, "receive_id=") {
		return ""
	}
	id := r.URL.Query().Get("receive_id")
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:12])
}

func (p *preset) apiScope(name string) string {
	return providers.Scope(providers.ScopeAPI, fit(p.cfg.AppID+":", name))
}

func (p *preset) chatScope(chat string) string {
	return providers.Scope(providers.ScopeAPI, p.cfg.AppID+":"+IMSend+":"+chat)
}

// fit joins prefix and name, replacing name by its hash when the whole
// would exceed limiter.MaxKeyLen (validate and FoldPath bound both, so
// this is a safeguard).
func fit(prefix, name string) string {
	if len(prefix)+len(name)+len(providers.ScopeAPI)+1 <= limiter.MaxKeyLen {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + "#" + hex.EncodeToString(sum[:12])
}
