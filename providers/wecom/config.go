package wecom

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/quotaware/throttle/internal/hostcheck"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
)

// Config describes a deployment's WeCom companies: what their calls share
// (egress IP and its limits, hosts, escalation, clock) and, in Apps, each
// company's own limits. Pass it to New. Zero fields take the defaults each
// states; a feature is turned off by its No... field, never by a negative
// value.
type Config struct {
	// Apps are the companies listed in advance, each with its own limits
	// (internal apps share their company's limits, so a company is one
	// entry whatever its apps). A third-party app need not list the
	// companies that authorise it: each is learned from its get_corp_token
	// exchange and limited with App's defaults (WeCom documents the same
	// per-company limits for third-party calls; an assumption where it
	// does not). One company is a list of one; none is allowed.
	Apps []App
	// Default is the CorpID a request of an unknown company is charged to.
	// Empty: the one company when Apps lists one, else a shared scope
	// "unknown" with Unknown's limits.
	Default string
	// Unknown holds the limits of the companies Apps does not list: the
	// shared scope of requests of unknown companies (when Default is
	// empty), and each company learned from a token but not listed (unless
	// Unlisted). Zero fields take App's defaults; its CorpID must be empty.
	Unknown App
	// Unlisted treats a learned company not in Apps as unknown.
	Unlisted bool

	// ThirdParty selects the third-party provider limits per egress IP.
	ThirdParty bool
	// Egress names the egress IP (or NAT pool) this deployment calls from,
	// for keys and scopes shared by every replica behind it (default
	// "default"). Replicas behind different IPs need different names.
	Egress string
	// Hosts the preset handles (default qyapi.weixin.qq.com).
	Hosts []string
	// APIs are paths of APIs the built-in catalog lacks (e.g. one WeCom
	// published after this release), each then limited on its own rather
	// than with every other uncatalogued path.
	APIs []string
	// IPPerMinute and IPPerHour limit each API's calls from the egress IP
	// (defaults 20,000 and 600,000; 40,000 and 1,200,000 with ThirdParty).
	IPPerMinute, IPPerHour int

	// Jitter widens every window: a rule keeps at most its limit in any
	// window of its period plus Jitter, so that latency varying by up to
	// Jitter cannot crowd one of WeCom's fixed windows (default 50ms).
	// NoJitter: none.
	Jitter   time.Duration
	NoJitter bool
	// TimeScale divides the length of every minute and hour window (default
	// 1), for tests against an emulator that runs that much faster than the
	// wall clock. Never set it against the real platform.
	TimeScale float64

	// Escalation is how long successive 45009s of one API penalise it
	// (default 1m, then 1h: the documented blocks of the minute and hour
	// limits). A 45009 within EscalationWindow after the previous penalty
	// ended takes the next step; one beyond the last step penalises until
	// the next midnight in Beijing (plus DayGrace).
	Escalation []time.Duration
	// EscalationWindow is how long after a penalty a repeat counts as the
	// same trouble (default 10m).
	EscalationWindow time.Duration
	// DayGrace ends a day-long penalty this long after midnight (default
	// 5s; under a minute). NoDayGrace: none.
	DayGrace   time.Duration
	NoDayGrace bool
	// MaxTracked bounds how many API scopes the escalation remembers
	// (default 1024); the oldest are forgotten first.
	MaxTracked int
	// ConcurrentRetry is the RetryAfter hint of a 45033 (too many calls in
	// flight): by then some of the others have finished (default 1s).
	ConcurrentRetry time.Duration
	// FailedTokenPenalty holds a secret's token exchanges
	// (/cgi-bin/gettoken) this long after each one WeCom refuses (a wrong
	// secret or corp ID, an IP not allowed; default 3s): WeCom intercepts
	// a caller that keeps failing (a 1 h block after about 2,000 failed
	// calls an hour, as reported), and an SDK retrying a wrong secret in
	// a loop gets there in minutes. At the default, each replica sends at
	// most 1,200 failures an hour for one secret; the company's other
	// secrets go on, the refused answer reaches the caller, and it is not
	// retried. NoFailedTokenPenalty: none.
	FailedTokenPenalty   time.Duration
	NoFailedTokenPenalty bool
	// InFlightLease is how long a replica that crashed mid-call holds its
	// App.MaxInFlight slot (default 30s).
	InFlightLease time.Duration
	// MemberPeekLimit bounds how much of a message's body Route reads for
	// its recipients (default 1 MiB, above the largest message WeCom
	// accepts); see App.PerMemberPerMinute.
	MemberPeekLimit int
	// EntityKey keys the hash that names members in rule keys, which live
	// in Redis, so that a reader of Redis cannot test guesses of UserIDs
	// against them. Every replica must use the same; read it from where the
	// corp secret is kept. Empty: a key derived from each CorpID, which
	// Redis readers see (set it).
	EntityKey string
	// DefaultPenalty applies to quota errors whose end is not implied
	// (default providers.DefaultPenalty).
	DefaultPenalty time.Duration
	// Clock is the time source of Classify (default time.Now).
	Clock func() time.Time
}

// App describes one company of a Config: its limits.
type App struct {
	// CorpID identifies the company; required.
	CorpID string
	// CorpPerMinute and CorpPerHour limit the company's calls to each API
	// (defaults 10,000 and 150,000).
	CorpPerMinute, CorpPerHour int
	// MaxInFlight caps the company's calls to one API in flight at once,
	// across every replica, to stay clear of 45033 (default 0: no cap;
	// WeCom does not publish its concurrency limit).
	MaxInFlight int
	// PerMemberPerMinute and PerMemberPerHour cap one app's messages
	// (/cgi-bin/message/send) to one member (defaults 30 and 1,000):
	// WeCom drops the excess without an error. NoPerMemberLimit turns both
	// off. Route reads touser, toparty, totag and agentid from the whole
	// body, up to Config.MemberPeekLimit bytes; member IDs compare without
	// regard to case, as WeCom's do. Up to 8 members listed in touser get
	// rules of their own, allowing PerMember less Broadcast; "@all", a
	// party, a tag, a longer list, an unknown agentid or a body not read
	// whole are charged to the company's broadcast rules, allowing
	// Broadcast (beside the members read, if any). So no member gets more
	// than PerMember however it is addressed, and the app is not held to
	// one member's rate.
	PerMemberPerMinute, PerMemberPerHour int
	NoPerMemberLimit                     bool
	// BroadcastPerMinute and BroadcastPerHour are the share of a member's
	// limits kept for messages not attributed to named members (defaults 5
	// and 100, or half the PerMember limit when that is less, at least 1);
	// each must be below the PerMember limit it shares.
	BroadcastPerMinute, BroadcastPerHour int
}

// settings is one company's Config and App together: what a profile is
// built from, with the defaults filled in.
type settings struct {
	Config
	App
}

// merge returns company a's settings in the deployment c, before defaults.
func (c *Config) merge(a App) settings { return settings{Config: *c, App: a} }

// checkSigns rejects the negative limits that used to mean "off": that is
// what NoPerMemberLimit says now.
func (a *App) checkSigns() error {
	if a.PerMemberPerMinute < 0 || a.PerMemberPerHour < 0 {
		return fmt.Errorf("wecom: App.PerMemberPerMinute and PerMemberPerHour must not be negative (NoPerMemberLimit turns them off), got %d and %d", a.PerMemberPerMinute, a.PerMemberPerHour)
	}
	return nil
}

const maxID = 64

func (c *settings) setDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.CorpPerMinute, defaultCorpPerMinute)
	def(&c.CorpPerHour, defaultCorpPerHour)
	if c.ThirdParty {
		def(&c.IPPerMinute, defaultThirdPartyIPPerMinute)
		def(&c.IPPerHour, defaultThirdPartyIPPerHour)
	} else {
		def(&c.IPPerMinute, defaultIPPerMinute)
		def(&c.IPPerHour, defaultIPPerHour)
	}
	def(&c.MaxTracked, defaultMaxTracked)
	if !c.NoPerMemberLimit {
		def(&c.PerMemberPerMinute, defaultPerMemberPerMinute)
		def(&c.PerMemberPerHour, defaultPerMemberPerHour)
	}
	def(&c.MemberPeekLimit, defaultMemberPeekLimit)
	def(&c.BroadcastPerMinute, min(defaultBroadcastPerMinute, max(c.PerMemberPerMinute/2, 1)))
	def(&c.BroadcastPerHour, min(defaultBroadcastPerHour, max(c.PerMemberPerHour/2, 1)))
	if c.Egress == "" {
		c.Egress = "default"
	}
	if c.Hosts == nil {
		c.Hosts = defaultHosts
	}
	// Values given and turned off: off wins, as in every preset.
	if c.NoJitter && c.Jitter >= 0 { // a negative one stays, refused below
		c.Jitter = 0
	} else {
		c.Jitter = cmp.Or(c.Jitter, defaultJitter)
	}
	c.TimeScale = cmp.Or(c.TimeScale, 1)
	if c.Escalation == nil {
		c.Escalation = defaultEscalation()
	}
	c.EscalationWindow = cmp.Or(c.EscalationWindow, defaultEscalationWindow)
	if c.NoDayGrace && c.DayGrace >= 0 { // a negative one stays, refused below
		c.DayGrace = 0
	} else {
		c.DayGrace = cmp.Or(c.DayGrace, defaultDayGrace)
	}
	c.InFlightLease = cmp.Or(c.InFlightLease, defaultInFlightLease)
	c.ConcurrentRetry = cmp.Or(c.ConcurrentRetry, defaultConcurrentRetry)
	c.FailedTokenPenalty = cmp.Or(c.FailedTokenPenalty, defaultFailedTokenPenalty)
	c.DefaultPenalty = cmp.Or(c.DefaultPenalty, providers.DefaultPenalty)
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

func (c *settings) validate() error {
	badID := func(s string) bool { return s == "" || len(s) > maxID || strings.ContainsAny(s, ": \t\r\n") }
	switch {
	case badID(c.CorpID):
		return fmt.Errorf("wecom: App.CorpID must be 1..%d bytes without ':' or spaces, got %q", maxID, c.CorpID)
	case badID(c.Egress):
		return fmt.Errorf("wecom: Config.Egress must be 1..%d bytes without ':' or spaces, got %q", maxID, c.Egress)
	case !(c.TimeScale >= 1) || math.IsInf(c.TimeScale, 1):
		return fmt.Errorf("wecom: Config.TimeScale must be a finite number of at least 1, got %v", c.TimeScale)
	case c.Jitter < 0 || c.Jitter > time.Minute:
		return fmt.Errorf("wecom: Config.Jitter must be within (0, 1m] (NoJitter: none), got %v", c.Jitter)
	case len(c.Escalation) == 0:
		return fmt.Errorf("wecom: Config.Escalation must not be empty")
	case c.EscalationWindow < 0:
		return fmt.Errorf("wecom: Config.EscalationWindow must not be negative, got %v", c.EscalationWindow)
	case c.DayGrace < 0 || c.DayGrace >= time.Minute:
		return fmt.Errorf("wecom: Config.DayGrace must be within (0, 1m) (NoDayGrace: none), got %v", c.DayGrace)
	case c.MaxTracked < 1:
		return fmt.Errorf("wecom: Config.MaxTracked must be at least 1, got %d", c.MaxTracked)
	case !c.NoPerMemberLimit && (c.PerMemberPerMinute < 1 || c.PerMemberPerHour < 1):
		return fmt.Errorf("wecom: App.PerMemberPerMinute and PerMemberPerHour must be positive, got %d and %d", c.PerMemberPerMinute, c.PerMemberPerHour)
	case c.MemberPeekLimit < 64 || c.MemberPeekLimit > 16<<20:
		return fmt.Errorf("wecom: Config.MemberPeekLimit must be within [64, 16MiB], got %d", c.MemberPeekLimit)
	case !c.NoPerMemberLimit && (c.BroadcastPerMinute < 1 || c.BroadcastPerMinute >= c.PerMemberPerMinute):
		return fmt.Errorf("wecom: App.BroadcastPerMinute must be within [1, PerMemberPerMinute (%d)), got %d", c.PerMemberPerMinute, c.BroadcastPerMinute)
	case !c.NoPerMemberLimit && (c.BroadcastPerHour < 1 || c.BroadcastPerHour >= c.PerMemberPerHour):
		return fmt.Errorf("wecom: App.BroadcastPerHour must be within [1, PerMemberPerHour (%d)), got %d", c.PerMemberPerHour, c.BroadcastPerHour)
	case c.MaxInFlight < 0:
		return fmt.Errorf("wecom: App.MaxInFlight must not be negative, got %d", c.MaxInFlight)
	case c.InFlightLease < time.Millisecond:
		return fmt.Errorf("wecom: Config.InFlightLease must be at least 1ms, got %v", c.InFlightLease)
	case c.ConcurrentRetry < 0:
		return fmt.Errorf("wecom: Config.ConcurrentRetry must not be negative, got %v", c.ConcurrentRetry)
	case c.FailedTokenPenalty < 0 || c.FailedTokenPenalty > time.Hour:
		return fmt.Errorf("wecom: Config.FailedTokenPenalty must be within [0, 1h] (0: the default), got %v", c.FailedTokenPenalty)
	case c.DefaultPenalty < 0:
		return fmt.Errorf("wecom: Config.DefaultPenalty must not be negative, got %v", c.DefaultPenalty)
	}
	if err := hostcheck.All("Config.Hosts", Name, c.Hosts); err != nil {
		return fmt.Errorf("wecom: %w", err)
	}
	for i, path := range c.APIs {
		// A request's path is read with "." and ".." resolved and
		// unescaped: an entry written otherwise would name no request.
		if err := catalog.CheckPath(path); err != nil {
			return fmt.Errorf("wecom: Config.APIs[%d]: want an API path such as /cgi-bin/user/get, got %q, which %v", i, path, err)
		}
		if _, err := catalog.New(path); err != nil || strings.ContainsAny(path, "{}: ") {
			return fmt.Errorf("wecom: Config.APIs[%d]: want an API path such as /cgi-bin/user/get, got %q", i, path)
		}
	}
	for i, d := range c.Escalation {
		// WeCom blocks for at least a minute: a shorter penalty only
		// collects another 45009.
		if d < time.Minute {
			return fmt.Errorf("wecom: Config.Escalation[%d] must be at least 1m, got %v", i, d)
		}
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"App.CorpPerMinute", c.CorpPerMinute}, {"App.CorpPerHour", c.CorpPerHour}, {"Config.IPPerMinute", c.IPPerMinute}, {"Config.IPPerHour", c.IPPerHour}} {
		if l.n < 1 {
			return fmt.Errorf("wecom: %s must be at least 1, got %d", l.name, l.n)
		}
	}
	return nil
}
