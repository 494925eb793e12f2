package feishu

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/quotaware/throttle/internal/hostcheck"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
)

// Config describes a deployment's Feishu / Lark apps: what they share
// (hosts, recipients' hashing, penalties, clock) and, in Apps, each app's
// levels and edition. Pass it to New. Zero fields take the defaults each
// states; a feature is turned off by its No... field, never by a negative
// value.
type Config struct {
	// Apps are the apps, each with its own levels and edition. A store
	// app serving many tenants needs one entry: its limits apply per app
	// per tenant (as Feishu documents), each tenant learned from its
	// tenant_access_token exchange. One app is a list of one.
	Apps []App
	// Default is the app_id a request of an unknown app is charged to.
	// Empty: the one app when Apps lists one, else a shared scope
	// "unknown" with Unknown's levels.
	Default string
	// Unknown holds the levels of the apps Apps does not list: the shared
	// scope of requests of unknown apps (when Default is empty), and each
	// app learned from a token but not listed (unless Unlisted). Zero
	// fields take App's defaults; its AppID must be empty.
	Unknown App
	// Unlisted treats a learned app not in Apps as unknown.
	Unlisted bool

	// Hosts the preset handles (default open.feishu.cn and
	// open.larksuite.com); only paths under /open-apis/ match.
	Hosts []string
	// ChatPeekLimit bounds how much of a send's body Route reads for its
	// receive_id (default 1 MiB, above the 150 KB Feishu accepts for a
	// message; bodies are usually far shorter and read whole at once). A
	// lower limit lets a longer body that Feishu accepts go to the unknown
	// recipient beside its chat's count: over the chat's limit.
	ChatPeekLimit int
	// EntityKey keys the hash that names chats and users in rule keys and
	// penalty scopes, which live in Redis, so that a reader of Redis cannot
	// test guesses (an email, a user_id) against them. Every replica must
	// use the same; read it from where the app secret is kept. Empty: a key
	// derived from each AppID, which Redis readers see (set it).
	EntityKey string
	// MonthGrace starts each month's quota, and ends a 99991403 penalty,
	// this long after midnight on the 1st (default 5s, under a minute).
	// NoMonthGrace: none. The grace names each month's count in Redis:
	// change it on every replica at once, at the start of a month, or the
	// month's count starts again from 0.
	MonthGrace   time.Duration
	NoMonthGrace bool
	// ShortPenalty is how long the other rate-limit codes (1000004,
	// 230020, ...) penalise their scope when no reset header says (default 1s).
	ShortPenalty time.Duration
	// Jitter widens every window: a rule keeps at most its limit in any
	// window of its period plus Jitter, so that latency varying by up to
	// Jitter cannot crowd one of Feishu's fixed windows. Unset, the
	// Transport measures the latency's spread and chooses the allowance
	// (providers.Headroom, 50 ms until measured); NoJitter: none.
	Jitter   time.Duration
	NoJitter bool
	// DefaultPenalty applies to quota errors whose end is not implied
	// (default providers.DefaultPenalty).
	DefaultPenalty time.Duration
	// Clock is the time source of Classify (default time.Now).
	Clock func() time.Time
}

// App describes one Feishu / Lark app of a Config.
type App struct {
	// AppID identifies the app (cli_...); required. Limits are per app, and
	// the token does not say which app it belongs to.
	AppID string
	// Levels is the level table: its entries go over LevelTable()'s, so
	// one level given changes that level alone (the caller's map is never
	// changed).
	Levels map[int]Level
	// Business raises level 10 to 100/s (Levels may give level 10 only at
	// that rate, a per-minute cap beside it). A tenant on the business
	// edition has no monthly quota: Business with FreeEdition is refused.
	Business bool
	// APIs maps API patterns to levels: its entries go over the defaults
	// (IMSend and the reply API at level 4), so one API given leaves the
	// others as they were; NoDefaultAPIs leaves the defaults out. A map
	// given used to replace the defaults: an entry for one API dropped
	// IMSend's 1,000-a-minute cap without a word.
	APIs          map[string]int
	NoDefaultAPIs bool
	// DefaultLevel applies to APIs not in APIs (default 4, the most common
	// level; an assumption, set yours). NoDefaultLevel gives them no rule,
	// only a penalty scope.
	DefaultLevel   int
	NoDefaultLevel bool
	// PerChat caps IM messages per second to one chat or user (default 5);
	// NoPerChat disables the rule. Sends and forwards name the recipient by
	// receive_id (with receive_id_type) in the body, which Route reads
	// whole, up to Config.ChatPeekLimit bytes; every receive_id there
	// counts, and an email address is compared without regard to case. A
	// reply counts against the chat of the message it answers when this
	// process has seen that message in an answer (a send, reply or
	// forward, or a GET of the message; the last 256Ki messages of every
	// app and tenant of the Preset together are remembered) or the
	// request's context names the chat (ReplyInChat), else against that
	// message alone. A send whose body cannot be read
	// whole (longer than the limit, not JSON, a read error) counts against
	// the recipients found and one shared "unknown recipient" of the app;
	// Feishu delivers no such body. A message held back by its recipient's
	// limit waits for that recipient's slot without booking the app's
	// shared rules ahead (rule.WithMaxBookAhead), so a busy chat never
	// holds up the others.
	PerChat   int
	NoPerChat bool
	// FreeEdition enforces MonthlyQuota per calendar month in Beijing. The
	// quota is the tenant's, whichever of its apps calls: the internal apps
	// of a Config share the deployment's own tenant unless Tenant says
	// otherwise, and a store app counts in each tenant it calls into. A
	// 99991403 stops every FreeEdition app of the tenant.
	FreeEdition bool
	// MonthlyQuota is the tenant's calls per month on the free edition
	// (default 10,000).
	MonthlyQuota int
	// Tenant names the tenant of an internal app whose monthly quota is not
	// the deployment's own (default: one tenant for every internal app of
	// the Config). Internal apps with the same Tenant share one quota. An
	// app nobody listed, and the scope of unknown tokens (Config.Unknown),
	// count in a tenant of their own unless Unknown.Tenant is set.
	Tenant string
}

// settings is one app's Config and App together: what a profile is built
// from, with the defaults filled in.
type settings struct {
	Config
	App
	// memory is the chats of the messages seen, one for every app and
	// tenant of a Preset and its rebuilds for a new latency allowance; nil:
	// the profile's own.
	memory *messageChats
}

// merge returns app a's settings in the deployment c, before defaults.
func (c *Config) merge(a App) settings { return settings{Config: *c, App: a} }

// checkGiven rejects what an app says before defaults that cannot hold:
// the negative values that used to mean "off" (that is what the No...
// fields say now), and fields that contradict another or that the app's
// edition would ignore, so that no value given is dropped without a word.
// A value given beside its own No... switch is not one of them: the
// switch turns it off, in every preset.
func (a *App) checkGiven() error {
	switch {
	case a.Business && a.FreeEdition:
		return errors.New("feishu: App.Business and App.FreeEdition: a tenant is on one edition")
	case a.Business && hasOtherRate(a.Levels, 10, businessLevel10):
		return fmt.Errorf("feishu: App.Levels[10] is %+v, but App.Business sets level 10 to %d/s: give one of them", a.Levels[10], businessLevel10.PerSecond)
	case !a.FreeEdition && a.MonthlyQuota != 0:
		return fmt.Errorf("feishu: App.MonthlyQuota counts only on the free edition (App.FreeEdition), got %d", a.MonthlyQuota)
	case !a.FreeEdition && a.Tenant != "":
		return fmt.Errorf("feishu: App.Tenant names whose monthly quota an app counts in: it applies only with App.FreeEdition, got %q", a.Tenant)
	case a.DefaultLevel < 0:
		return fmt.Errorf("feishu: App.DefaultLevel must not be negative (NoDefaultLevel: no rule), got %d", a.DefaultLevel)
	case a.PerChat < 0:
		return fmt.Errorf("feishu: App.PerChat must not be negative (NoPerChat disables the rule), got %d", a.PerChat)
	}
	return nil
}

// businessLevel10 is level 10 on the business edition (App.Business).
var businessLevel10 = Level{PerSecond: 100}

// hasOtherRate reports whether levels gives level n another rate a second
// than want's (a per-minute cap beside the same rate is no contradiction).
func hasOtherRate(levels map[int]Level, n int, want Level) bool {
	l, ok := levels[n]
	return ok && l.PerSecond != want.PerSecond
}

const maxAppID = 64

// maxAPILen bounds an App.APIs key, so that an API name fits the keys,
// scopes and metric attributes it goes into.
const maxAPILen = 128

func (c *settings) setDefaults() {
	if c.Hosts == nil {
		c.Hosts = defaultHosts
	}
	levels := LevelTable()
	if c.Business {
		levels[10] = businessLevel10
	}
	maps.Copy(levels, c.Levels)
	c.Levels = levels
	apis := defaultAPIs()
	if c.NoDefaultAPIs {
		apis = map[string]int{}
	}
	maps.Copy(apis, c.APIs)
	c.APIs = apis
	if !c.NoDefaultLevel {
		c.DefaultLevel = cmp.Or(c.DefaultLevel, defaultLevel)
	}
	if !c.NoPerChat {
		c.PerChat = cmp.Or(c.PerChat, defaultPerChat)
	}
	c.ChatPeekLimit = cmp.Or(c.ChatPeekLimit, defaultChatPeekLimit)
	c.MonthlyQuota = cmp.Or(c.MonthlyQuota, defaultMonthlyQuota)
	// Values given and turned off: off wins, as in every preset.
	if c.NoMonthGrace && c.MonthGrace >= 0 { // a negative one stays, refused below
		c.MonthGrace = 0
	} else {
		c.MonthGrace = cmp.Or(c.MonthGrace, defaultMonthGrace)
	}
	c.ShortPenalty = cmp.Or(c.ShortPenalty, defaultShortPenalty)
	if c.NoJitter && c.Jitter >= 0 { // a negative one stays, refused below
		c.Jitter = 0
	} else {
		c.Jitter = cmp.Or(c.Jitter, defaultJitter)
	}
	c.DefaultPenalty = cmp.Or(c.DefaultPenalty, providers.DefaultPenalty)
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

func (c *settings) validate() error {
	switch {
	case c.AppID == "" || len(c.AppID) > maxAppID || strings.ContainsAny(c.AppID, ": \t\r\n"):
		return fmt.Errorf("feishu: App.AppID must be 1..%d bytes without ':' or spaces, got %q", maxAppID, c.AppID)
	case !c.NoDefaultLevel && !c.hasLevel(c.DefaultLevel):
		return fmt.Errorf("feishu: App.DefaultLevel %d is not in App.Levels (NoDefaultLevel: none)", c.DefaultLevel)
	case !c.NoPerChat && c.PerChat < 1:
		return fmt.Errorf("feishu: App.PerChat must be positive, got %d", c.PerChat)
	case c.ChatPeekLimit < 64 || c.ChatPeekLimit > 16<<20:
		return fmt.Errorf("feishu: Config.ChatPeekLimit must be within [64, 16MiB], got %d", c.ChatPeekLimit)
	case c.MonthlyQuota < 1:
		return fmt.Errorf("feishu: App.MonthlyQuota must be at least 1, got %d", c.MonthlyQuota)
	case len(c.Tenant) > maxAppID || strings.ContainsAny(c.Tenant, ": \t\r\n"):
		return fmt.Errorf("feishu: App.Tenant must be at most %d bytes without ':' or spaces, got %q", maxAppID, c.Tenant)
	case c.MonthGrace < 0 || c.MonthGrace >= time.Minute:
		return fmt.Errorf("feishu: Config.MonthGrace must be within (0, 1m) (NoMonthGrace: none), got %v", c.MonthGrace)
	case c.ShortPenalty < 0:
		return fmt.Errorf("feishu: Config.ShortPenalty must not be negative, got %v", c.ShortPenalty)
	case c.Jitter < 0 || c.Jitter > time.Second:
		return fmt.Errorf("feishu: Config.Jitter must be within (0, 1s] (NoJitter: none), got %v", c.Jitter)
	case c.DefaultPenalty < 0:
		return fmt.Errorf("feishu: Config.DefaultPenalty must not be negative, got %v", c.DefaultPenalty)
	}
	if err := hostcheck.All("Config.Hosts", Name, c.Hosts); err != nil {
		return fmt.Errorf("feishu: %w", err)
	}
	for n, l := range c.Levels {
		if l.PerSecond < 0 || l.PerMinute < 0 || l == (Level{}) {
			return fmt.Errorf("feishu: App.Levels[%d] must have a positive PerSecond or PerMinute and no negative one, got %+v", n, l)
		}
	}
	for name, n := range c.APIs {
		method, path, ok := strings.Cut(name, " ")
		if !ok || method == "" || strings.ToUpper(method) != method || !strings.HasPrefix(path, "/open-apis/") ||
			strings.ContainsAny(path, " ?#") || len(name) > maxAPILen {
			return fmt.Errorf("feishu: App.APIs[%q]: the key must read \"METHOD /open-apis/...\" (at most %d bytes)", name, maxAPILen)
		}
		// A request's path is read with "." and ".." resolved and
		// unescaped: a key written otherwise would name no request, and
		// its level would apply to nothing.
		if err := catalog.CheckPath(path); err != nil {
			return fmt.Errorf("feishu: App.APIs[%q]: the key must read \"METHOD /open-apis/...\"; its path %v", name, err)
		}
		if !c.hasLevel(n) {
			return fmt.Errorf("feishu: App.APIs[%q]: level %d is not in App.Levels", name, n)
		}
	}
	return nil
}

func (c *settings) hasLevel(n int) bool { _, ok := c.Levels[n]; return ok }
