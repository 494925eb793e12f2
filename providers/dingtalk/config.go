package dingtalk

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/quotaware/throttle/internal/hostcheck"
	"github.com/quotaware/throttle/providers/internal/catalog"
	"github.com/quotaware/throttle/providers/internal/strikes"
)

// Edition is the customer's DingTalk edition, which sets the per-app,
// per-API rate.
type Edition int

// Editions and their per-app, per-API limits.
const (
	Standard     Edition = iota // 20 calls/s (the zero value)
	Professional                // 40 calls/s
	Exclusive                   // 60 calls/s
)

// Rate is the edition's per-app, per-API limit in calls per second.
func (e Edition) Rate() int {
	switch e {
	case Professional:
		return 40
	case Exclusive:
		return 60
	}
	return 20
}

// String implements fmt.Stringer.
func (e Edition) String() string {
	switch e {
	case Standard:
		return "standard"
	case Professional:
		return "professional"
	case Exclusive:
		return "exclusive"
	}
	return fmt.Sprintf("Edition(%d)", int(e))
}

// Defaults, from the platform's documentation unless marked as a guess;
// each is stated in the doc comment of the field it fills.
const (
	defaultISVRate      = 40               // per suite, per customer org, per API, per second (seen in the field)
	defaultEgressLimit  = 10000            // calls from one egress IP ...
	defaultEgressPeriod = 20 * time.Second // ... in any 20 s
	// defaultEgressBurstShare sets EgressBurst to a fifth of EgressLimit,
	// which gives the per-IP rule a tolerance of a quarter of its period
	// (5 s for 20 s). The rule is shared by every API: when one busy API
	// books slots ahead (up to the request's wait budget), the rule's clock
	// moves with it, and a quiet API would wait behind those bookings unless
	// the tolerance covers them. It costs a fifth of the per-IP sustained
	// rate (8,001 per 20 s, 400/s), rarely what binds one deployment; the
	// contract, at most EgressLimit in any EgressPeriod, holds either way.
	defaultEgressBurstShare = 5
	defaultMonthlyQuota     = 5000            // metered calls per org per calendar month, standard edition since 2025-11-19
	defaultMonthGrace       = 5 * time.Second // a new month starts this late, against clock skew
	defaultJitter           = 50 * time.Millisecond
	defaultIPBanPenalty     = 5 * time.Minute
	defaultRobotPerMinute   = 20 // custom group robot messages per robot per minute
	defaultRobotPenalty     = 10 * time.Minute
	defaultPeekLimit        = 8 << 10 // error bodies are small; success bodies need not be buffered whole
	defaultEgress           = "default"
)

// defaultHosts are the two API generations' hosts.
var defaultHosts = []string{"oapi.dingtalk.com", "api.dingtalk.com"}

// defaultMeteredPaths are the APIs counted against the organisation's
// monthly quota. The platform does not publish the list: this is a guess
// (reads of the address book, the calls an integration makes most), to be
// replaced by App.MeteredPaths when a user knows better. Each entry is
// looked up in the API catalog (a placeholder such as {userId} matches the
// template's parameter), or in App.APIs; one in neither is refused.
var defaultMeteredPaths = []string{
	"/user/get",
	"/user/getuserinfo",
	"/department/list",
	"/topapi/v2/user/get",
	"/topapi/v2/user/list",
	"/topapi/v2/user/getuserinfo",
	"/topapi/v2/user/getbymobile",
	"/topapi/user/getbyunionid",
	"/topapi/user/listid",
	"/topapi/user/listsimple",
	"/topapi/v2/department/get",
	"/topapi/v2/department/listsub",
	"/topapi/v2/department/listsubid",
	"/v1.0/contact/users/{userId}",
	"/v1.0/contact/users/{unionId}/departments",
}

// Config describes a deployment's DingTalk apps: what they share (hosts,
// the egress IP's limits, robots, penalties, jitter) and, in Apps, what
// each app has of its own. Pass it to New. Zero fields take the defaults
// each states; a feature is turned off by its No... field, never by a
// negative value.
type Config struct {
	// Apps are the apps (Edition, PerAPIRate ... per app) and ISV suites
	// (ISV: true, AppKey the SuiteKey; their customer orgs need no entry:
	// each request's org is learned from its token, see package apps).
	// One app is a list of one. None is a deployment that only sends
	// group robots' messages (each robot is limited by its own token) or
	// leaves every app to be learned: a request of an app not learned is
	// limited as Default's below says, at a standard app's rate.
	Apps []App
	// Default is the AppKey that a request is charged to when its app is
	// not known (its token was not learned and the caller did not name the
	// app). Empty: the only app when Apps lists one (unless it is an ISV
	// suite without a CorpID, which names no org for them); otherwise such
	// requests share one conservative scope, app "unknown" at the lowest
	// per-API rate of Apps, so that they can never exceed any app's limit,
	// but may use less of it. An ISV suite without a CorpID cannot be the
	// Default. Adding a second app to a one-app Config moves those
	// requests from the first app's keys to "unknown": set Default to the
	// first app in the same change to keep them where they were.
	Default string
	// Unlisted says what to do with a request whose learned app is not in
	// Apps: false (the default) limits it as a new standard-edition
	// internal app with the defaults of App (its requests whose token named
	// an org, such as an ISV suite's, per org, each org its own per-API rule
	// and monthly quota, at that app's rate); true treats it as unknown.
	Unlisted bool

	// Egress names this deployment's egress IP (default "default"): every
	// profile that shares it shares the per-IP limit and the IP ban.
	Egress string
	// EgressLimit calls in any EgressPeriod leave one IP (default 10,000
	// per 20 s); more gets the IP banned from every API for IPBanPenalty.
	EgressLimit  int
	EgressPeriod time.Duration
	// EgressBurst is how many calls of any API may go back to back
	// (default EgressLimit/5, which gives the per-IP rule a tolerance of a
	// quarter of its period: a busy API booking slots ahead then does not
	// hold a quiet one behind its bookings).
	EgressBurst int

	// MonthGrace starts each month this late, against clock skew
	// (default 5 s; under a minute). NoMonthGrace: none. The grace names
	// each month's count in Redis: change it on every replica at once, at
	// the start of a month, or the month's count starts again from 0.
	MonthGrace   time.Duration
	NoMonthGrace bool

	// Jitter widens every paced window: rules keep Limit calls in any
	// window of Period+Jitter, so that calls whose latency varies by up to
	// Jitter never land more than Limit in one of the provider's wall-clock
	// windows (under a second). Left zero, it is measured from the calls'
	// latency (50 ms until measured; README, "Headroom for latency"); set,
	// it is fixed at that value. NoJitter: none.
	Jitter   time.Duration
	NoJitter bool

	// DefaultPenalty applies when an error implies no end (default 5 min).
	DefaultPenalty time.Duration
	// Escalation is how long successive global per-API errors of one API
	// (90002, QpsLimitForApi: every caller of the API at once, at the top
	// of the hour) penalise it (default 1 s, 2 s, then 4 s: the docs'
	// backoff). An error within EscalationWindow after the previous
	// penalty ended takes the next step; one beyond the last step repeats
	// it. Nil: the default; empty: an error.
	Escalation []time.Duration
	// EscalationWindow is how long after a penalty a repeat counts as the
	// same trouble (default 10 s); later, the API starts again at the
	// first step.
	EscalationWindow time.Duration
	// IPBanPenalty is how long the egress IP is banned (default 5 min).
	IPBanPenalty time.Duration

	// RobotPerMinute limits messages per custom group robot (default 20),
	// and RobotPenalty is how long the platform throttles a robot that
	// sends more (error 410100, default 10 min). NoRobotLimit: robots get
	// no rule and no penalty scope of their own, so a 410100 then stops
	// nothing and reaches the caller as a fatal answer.
	RobotPerMinute int
	RobotPenalty   time.Duration
	NoRobotLimit   bool
	// RobotWindow is the window RobotPerMinute counts (default a minute);
	// only a test against an emulator whose window is shortened changes it.
	RobotWindow time.Duration

	// Hosts are the hosts the preset handles, as "host" or "host:port"
	// (default oapi.dingtalk.com and api.dingtalk.com). Tests point it at
	// an emulator.
	Hosts []string
	// PeekLimit bounds how much of a body the classifier reads (default
	// 8 KiB; at least 256).
	PeekLimit int
	// EntityKey keys the hash that names a custom robot (by its token) in
	// rule keys and penalty scopes, which live in Redis. Every replica must
	// use the same. Empty: a fixed key (a robot's token is random enough
	// that its hash reveals nothing; set it anyway to keep the names
	// unlinkable across deployments).
	EntityKey string
	// Clock is the time source of Classify, from which penalty ends are
	// computed (default time.Now).
	Clock func() time.Time

	// backoff is the ladder of the global per-API errors, one for the
	// Preset and every rebuild of it for a new latency allowance (which
	// copies the Config), so that a rebuild does not start it again.
	backoff *strikes.Book
}

// App describes one DingTalk app, or one ISV suite, of a Config.
type App struct {
	// AppKey identifies the app (for a third-party app: its SuiteKey).
	// Required: the access token does not reveal the app, and every
	// per-app limit is keyed by it.
	AppKey string

	// CorpID is the organisation: for an internal app, the owner of the
	// monthly quota (default: the AppKey stands for it, so that two apps of
	// one company listed without it count a month each: give them both the
	// company's CorpID); for a third-party
	// (ISV) app, the customer org whose per-org limits apply to requests
	// that name none.
	CorpID string

	// Edition sets PerAPIRate: 20, 40 or 60 calls/s. A PerAPIRate given
	// beside another edition than Standard must say the same.
	Edition Edition
	// PerAPIRate is the per-app, per-API limit in calls per second. Not for
	// an ISV app, whose limit is ISVRate.
	PerAPIRate int
	// Burst is how many calls to one API may go back to back (default 1:
	// evenly paced, the full rate). See rule.WithBurst.
	Burst int

	// ISV marks a third-party app: its per-API limit is per customer org,
	// ISVRate calls/s, and its penalties may name the org.
	ISV bool
	// ISVRate is the per-suite, per-org, per-API limit (default 40/s).
	// ISVRate and OrgFromRequest apply only to an ISV app.
	ISVRate int
	// OrgFromRequest returns the customer org of a request for an ISV app
	// serving many orgs, when the org learned from the token is not known
	// (e.g. from the request's context); "" falls back to CorpID. It must
	// be cheap and must not read the body.
	OrgFromRequest func(*http.Request) string

	// MonthlyQuota is the organisation's metered calls per calendar month
	// in Beijing time (default 5,000). NoMonthlyQuota: no monthly rule.
	MonthlyQuota   int
	NoMonthlyQuota bool
	// MeteredPaths are the APIs the quota counts (nil: a guess at the
	// address book reads, the calls integrations make most; empty: none).
	// Each must be an API of the catalog or of APIs: an entry that is
	// neither is refused, since a typo would leave the real API off the
	// month's count.
	MeteredPaths []string

	// APIs are templates of APIs the built-in catalog lacks, e.g. one
	// DingTalk published after this release: "/topapi/new/thing" (old
	// API, any method) or "GET /v1.0/new/things/{id}" (new API). Each is
	// then limited on its own, rather than with every other uncatalogued
	// path as one API.
	APIs []string
}

// settings is one app's Config and App together: what a preset is built
// from, with the defaults filled in.
type settings struct {
	Config
	App
}

// merge returns app's settings in the deployment c, before defaults.
func (c *Config) merge(a App) settings { return settings{Config: *c, App: a} }

// checkGiven rejects what an app and its deployment say before defaults
// that cannot hold: the negative values that used to mean "off" (that is
// what the No... fields say now), and fields that contradict another or
// that the app's kind would ignore, so that no value given is dropped
// without a word. A value given beside its own No... switch is not one of
// them: the switch turns it off, in every preset.
func (c *Config) checkGiven(a App) error {
	switch {
	case a.Edition > Standard && a.Edition <= Exclusive && a.PerAPIRate != 0 && a.PerAPIRate != a.Edition.Rate():
		return fieldErr("PerAPIRate", "is %d, but Edition %v sets %d: give one of them", a.PerAPIRate, a.Edition, a.Edition.Rate())
	case a.ISV && a.PerAPIRate != 0:
		return fieldErr("PerAPIRate", "does not apply to an ISV app, whose per-org, per-API limit is ISVRate, got %d", a.PerAPIRate)
	case a.ISV && a.Edition != Standard:
		return fieldErr("Edition", "does not apply to an ISV app, whose per-org, per-API limit is ISVRate, got %v", a.Edition)
	case !a.ISV && a.ISVRate != 0:
		return fieldErr("ISVRate", "applies only to an ISV app (ISV: true), got %d", a.ISVRate)
	case !a.ISV && a.OrgFromRequest != nil:
		return fieldErr("OrgFromRequest", "applies only to an ISV app (ISV: true)")
	case !a.NoMonthlyQuota && a.MonthlyQuota > 0 && a.MeteredPaths != nil && len(a.MeteredPaths) == 0:
		return fieldErr("MeteredPaths", "is empty, so MonthlyQuota %d would count no call (NoMonthlyQuota turns the rule off)", a.MonthlyQuota)
	case a.MonthlyQuota < 0:
		return fieldErr("MonthlyQuota", "must not be negative (NoMonthlyQuota turns the rule off), got %d", a.MonthlyQuota)
	case c.MonthGrace < 0:
		return fieldErr("MonthGrace", "must not be negative (NoMonthGrace: none), got %v", c.MonthGrace)
	case c.Jitter < 0:
		return fieldErr("Jitter", "must not be negative (NoJitter: none), got %v", c.Jitter)
	case c.RobotPerMinute < 0:
		return fieldErr("RobotPerMinute", "must not be negative (NoRobotLimit turns the rule off), got %d", c.RobotPerMinute)
	}
	return nil
}

// withDefaults fills zero fields and validates the result.
func (c settings) withDefaults() (settings, error) {
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Edition < Standard || c.Edition > Exclusive {
		return c, fieldErr("Edition", "must be Standard, Professional or Exclusive, got %d", int(c.Edition))
	}
	setInt(&c.PerAPIRate, c.Edition.Rate())
	setInt(&c.Burst, 1)
	setInt(&c.ISVRate, defaultISVRate)
	if c.Egress == "" {
		c.Egress = defaultEgress
	}
	setInt(&c.EgressLimit, defaultEgressLimit)
	setDur(&c.EgressPeriod, defaultEgressPeriod)
	setInt(&c.EgressBurst, max(1, c.EgressLimit/defaultEgressBurstShare))
	if !c.NoMonthlyQuota {
		setInt(&c.MonthlyQuota, defaultMonthlyQuota)
	}
	if c.MeteredPaths == nil {
		c.MeteredPaths = defaultMeteredPaths
	}
	if c.NoMonthGrace {
		c.MonthGrace = 0
	} else {
		setDur(&c.MonthGrace, defaultMonthGrace)
	}
	if c.NoJitter {
		c.Jitter = 0
	} else {
		setDur(&c.Jitter, defaultJitter)
	}
	setDur(&c.DefaultPenalty, 5*time.Minute)
	if c.Escalation == nil {
		c.Escalation = defaultEscalation
	}
	setDur(&c.EscalationWindow, defaultEscalationWindow)
	setDur(&c.IPBanPenalty, defaultIPBanPenalty)
	if !c.NoRobotLimit {
		setInt(&c.RobotPerMinute, defaultRobotPerMinute)
	}
	setDur(&c.RobotPenalty, defaultRobotPenalty)
	setDur(&c.RobotWindow, time.Minute)
	if c.Hosts == nil {
		c.Hosts = defaultHosts
	}
	setInt(&c.PeekLimit, defaultPeekLimit)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c, c.validate()
}

func (c *settings) validate() error {
	switch {
	case c.AppKey == "":
		return fieldErr("AppKey", "is required: the access token does not reveal the app")
	case !validName(c.AppKey):
		return fieldErr("AppKey", "must be 1..64 letters, digits, '_', '-' or '.', got %q", c.AppKey)
	case c.CorpID != "" && !validName(c.CorpID):
		return fieldErr("CorpID", "must be 1..64 letters, digits, '_', '-' or '.', got %q", c.CorpID)
	case c.ISV && c.CorpID == "" && c.OrgFromRequest == nil:
		return fieldErr("CorpID", "is required for an ISV app unless OrgFromRequest is set")
	case !validName(c.Egress):
		return fieldErr("Egress", "must be 1..64 letters, digits, '_', '-' or '.', got %q", c.Egress)
	case c.PerAPIRate < 1:
		return fieldErr("PerAPIRate", "must be positive, got %d", c.PerAPIRate)
	case c.ISVRate < 1:
		return fieldErr("ISVRate", "must be positive, got %d", c.ISVRate)
	case c.Burst < 1 || c.Burst > c.apiRate():
		return fieldErr("Burst", "must be within 1..the per-API rate (%d), got %d", c.apiRate(), c.Burst)
	case c.EgressLimit < 1:
		return fieldErr("EgressLimit", "must be positive, got %d", c.EgressLimit)
	case c.EgressPeriod < time.Millisecond || c.EgressPeriod > maxPeriod:
		return fieldErr("EgressPeriod", "must be within [1ms, %v], got %v", maxPeriod, c.EgressPeriod)
	case c.EgressBurst < 1 || c.EgressBurst > c.EgressLimit:
		return fieldErr("EgressBurst", "must be within 1..EgressLimit (%d), got %d", c.EgressLimit, c.EgressBurst)
	case c.MonthGrace >= time.Minute:
		return fieldErr("MonthGrace", "must be under a minute, got %v", c.MonthGrace)
	case c.Jitter >= time.Second:
		return fieldErr("Jitter", "must be under a second (it widens a 1 s window), got %v", c.Jitter)
	case c.DefaultPenalty < 0:
		return fieldErr("DefaultPenalty", "must not be negative, got %v", c.DefaultPenalty)
	case len(c.Escalation) == 0:
		return fieldErr("Escalation", "must not be empty (nil: 1s, 2s, 4s)")
	case c.EscalationWindow < 0:
		return fieldErr("EscalationWindow", "must not be negative, got %v", c.EscalationWindow)
	case c.IPBanPenalty < 0:
		return fieldErr("IPBanPenalty", "must not be negative, got %v", c.IPBanPenalty)
	case c.RobotPenalty < 0:
		return fieldErr("RobotPenalty", "must not be negative, got %v", c.RobotPenalty)
	case c.RobotWindow < time.Millisecond || c.RobotWindow > maxPeriod:
		return fieldErr("RobotWindow", "must be within [1ms, %v], got %v", maxPeriod, c.RobotWindow)
	case c.PeekLimit < 256 || c.PeekLimit > 16<<20:
		return fieldErr("PeekLimit", "must be within 256 bytes..16 MiB, got %d", c.PeekLimit)
	}
	if err := hostcheck.All("Config.Hosts", Name, c.Hosts); err != nil {
		return fmt.Errorf("dingtalk: %w", err)
	}
	for i, d := range c.Escalation {
		if d <= 0 || d > time.Hour {
			return fieldErr(fmt.Sprintf("Escalation[%d]", i), "must be within (0, 1h], got %v", d)
		}
	}
	for _, p := range c.MeteredPaths {
		if p == "" || p[0] != '/' || strings.ContainsAny(p, " ?#") {
			return fieldErr("MeteredPaths", "entries must be paths starting with '/', got %q", p)
		}
	}
	for _, a := range c.APIs {
		if _, err := catalog.New(a); err != nil {
			return fieldErr("APIs", "entries must read \"/path\" or \"METHOD /path\": %v", err)
		}
	}
	return nil
}

// apiRate is the per-API limit that applies: per customer org for an ISV
// app, per app otherwise.
func (c *settings) apiRate() int {
	if c.ISV {
		return c.ISVRate
	}
	return c.PerAPIRate
}

// appFields are the fields of App, which errors name as such.
var appFields = map[string]bool{
	"AppKey": true, "CorpID": true, "Edition": true, "PerAPIRate": true, "Burst": true, "ISV": true,
	"ISVRate": true, "OrgFromRequest": true, "MonthlyQuota": true, "MeteredPaths": true, "APIs": true,
}

// maxPeriod bounds the periods of the preset's rules: a rule's longest
// (ten years, rule.New's bound) less the longest Jitter added to it (under
// a second, checked with the rest). Past it, rule.New's own error named
// neither the preset nor the field.
const maxPeriod = 10*365*24*time.Hour - time.Second

// fieldErr names the field at fault: "App.X" for an app's, "Config.X" for
// the deployment's (Build adds which app: "Config.Apps[i]").
func fieldErr(field, format string, args ...any) error {
	owner := "Config"
	if appFields[field] {
		owner = "App"
	}
	return fmt.Errorf("dingtalk: %s.%s %s", owner, field, fmt.Sprintf(format, args...))
}

// validName accepts the characters of AppKeys, CorpIDs and egress names, so
// that keys built from them stay readable and unambiguous.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
