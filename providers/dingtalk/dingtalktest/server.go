package dingtalktest

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// Options configure the emulator. Zero fields take the platform's values.
//
// Counting windows (the second, EgressWindow, the calendar month) follow
// Clock as they are; TimeScale shortens only penalties (the IP ban), so a
// test can watch a 5-minute ban end in seconds while limits are counted
// exactly as the platform counts them. To shrink a window, set it directly
// (e.g. EgressWindow: time.Second).
type Options struct {
	// QPS is the per-app, per-API limit, counted in fixed wall-clock
	// seconds of Clock (default 20); AppQPS overrides it per app key (an
	// app of a higher edition).
	QPS    int
	AppQPS map[string]int
	// ISVQPS is a third-party suite's limit per customer org, per API
	// (default 40), for tokens issued by the ISV token endpoints
	// (/v1.0/oauth2/corpAccessToken, /service/get_corp_token); exceeding it
	// answers 90019 / QpsLimitForSuitekeyAndOrgAndApi.
	ISVQPS int
	// AllQPS is the limit on all callers of one API, every app and org,
	// per fixed wall-clock second (0: none; DingTalk does not publish
	// its own): beyond it every caller gets 90002 / QpsLimitForApi. It is
	// counted before the per-app limit, and a call it refuses counts
	// there too, as the platform charges every arrival.
	AllQPS int
	// EgressLimit calls per fixed EgressWindow from the client's IP
	// (default 10,000 per 20 s); the next call bans the IP for BanDuration,
	// every API included.
	EgressLimit  int
	EgressWindow time.Duration
	BanDuration  time.Duration // default 5 minutes, divided by TimeScale
	// BanHTML answers a banned IP with the gateway's HTML page rather than
	// the JSON {"status":1111,...}.
	BanHTML bool

	// MonthlyQuota is the metered calls per organisation per calendar month
	// in Beijing time (default 5,000; negative: unlimited): an ISV token's
	// customer org, the organisation an app's token of the newer form
	// (/v1.0/oauth2/{corpId}/token) names, else each app its own, the
	// emulator knowing no other org of an app. MeteredPaths are
	// the metered APIs (nil: the preset's default guess, in the emulator's own copy), looked up in the
	// emulator's templates like any request.
	MonthlyQuota int
	MeteredPaths []string

	// Tokens maps access tokens to app keys, for tests that skip the token
	// endpoints. Apps maps app keys to secrets that the token endpoints
	// accept (nil: any key and secret). DefaultApp, when set, is the app of
	// a request whose token is missing or unknown; otherwise such a
	// request gets the platform's invalid-token error.
	Tokens     map[string]string
	Apps       map[string]string
	DefaultApp string
	// Suites maps suite keys to secrets that the ISV token endpoints
	// accept (nil: any suite and secret); every token they issue belongs
	// to the suite in the customer org the request names.
	Suites map[string]string

	// Clock is the emulator's time (default time.Now): arrivals are counted
	// and recorded at Clock().
	Clock func() time.Time
	// TimeScale divides penalty durations (default 1; 60 makes a 5-minute
	// ban last 5 s).
	TimeScale float64
	// RobotLimit is how many messages a custom group robot
	// (POST /robot/send) may send in any RobotWindow (default 20 in any
	// minute, counted sliding: the strictest reading of "20 per minute");
	// the next one throttles the robot for RobotPenalty (default 10
	// minutes, divided by TimeScale) with error 410100.
	RobotLimit   int
	RobotWindow  time.Duration
	RobotPenalty time.Duration

	// LatencyMin and LatencyMax add a uniform random delay to each request
	// before it is counted, as the network between client and platform
	// does: jitter moves calls across the platform's window boundaries.
	LatencyMin, LatencyMax time.Duration
}

// The platform's limits, as DingTalk documents them (the preset keeps its
// own copy: the emulator is the provider, not the client).
const (
	egressLimit  = 10000            // calls from one egress IP ...
	egressWindow = 20 * time.Second // ... in any 20 s
	banDuration  = 5 * time.Minute  // an egress IP's ban (90001)
	monthlyQuota = 5000             // metered calls per org per month, standard edition
)

func (o *Options) defaults() {
	if o.QPS <= 0 {
		o.QPS = 20
	}
	if o.ISVQPS <= 0 {
		o.ISVQPS = 40
	}
	if o.EgressLimit <= 0 {
		o.EgressLimit = egressLimit
	}
	if o.EgressWindow <= 0 {
		o.EgressWindow = egressWindow
	}
	if o.BanDuration <= 0 {
		o.BanDuration = banDuration
	}
	if o.MonthlyQuota == 0 {
		o.MonthlyQuota = monthlyQuota
	}
	if o.MeteredPaths == nil {
		o.MeteredPaths = defaultMeteredPaths
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	if o.RobotLimit <= 0 {
		o.RobotLimit = 20
	}
	if o.RobotWindow <= 0 {
		o.RobotWindow = time.Minute
	}
	if o.RobotPenalty <= 0 {
		o.RobotPenalty = 10 * time.Minute
	}
	if o.LatencyMax < o.LatencyMin {
		o.LatencyMax = o.LatencyMin
	}
}

// Record is one request as the emulator saw it.
type Record struct {
	At     time.Time // arrival on Clock, after the emulated latency
	Method string
	Path   string
	API    string // the template the call matched, or "uncatalogued": the unit the per-API limit counts
	App    string // "" when the token was unknown
	Org    string // the customer org of an ISV suite's token; "" otherwise
	Status int
	Code   string // the error code answered ("" on success; "ip-ban" for the ban page)
}

// Stats counts what the emulator did.
type Stats struct {
	Requests      int // every request
	Rejected      int // refused by a per-API limit or the monthly quota
	AllRejected   int // of which by the limit on all callers of one API (AllQPS)
	Bans          int // IP bans triggered
	BannedAnswers int // answers given while banned (the triggering call included)
	Injected      int // answers forced by fault injection
}

// Server is a running emulator. Its embedded httptest.Server gives URL,
// Client and Close.
type Server struct {
	*httptest.Server
	opts    Options
	metered map[string]bool // by API
	// latMax overrides Options.LatencyMax once SetLatencyMax was called
	// (ns; -1 until then): a spread that grows mid-run.
	latMax atomic.Int64
	apis   *emulator.Templates // the emulator's own copy of DingTalk's API templates

	mu        sync.Mutex
	tokens    map[string]holder
	issued    map[string]string // the token of each app, org and API generation
	qpsSecond int64
	qps       map[string]int // app + "\x00" + org + "\x00" + API path, in qpsSecond
	orgFaults map[string]*emulator.Faults[fault]
	egressWin int64
	egress    int
	banUntil  time.Time
	month     map[string]int // app + "\x00" + "2006-01", metered calls
	robots    map[string]*robot
	faults    emulator.Faults[fault]
	records   []Record
	stats     Stats
}

type fault struct {
	busy   bool // the generation's "system busy" answer
	status int
	body   string
}

// New starts an emulator; Close it when done.
func New(opts Options) *Server {
	opts.defaults()
	s := &Server{
		opts:    opts,
		metered: make(map[string]bool, len(opts.MeteredPaths)),
		tokens:  make(map[string]holder, len(opts.Tokens)),
		qps:     make(map[string]int),
		month:   make(map[string]int),
		robots:  make(map[string]*robot),
	}
	s.apis = emulator.NewTemplates(templates)
	for _, p := range opts.MeteredPaths {
		found := false
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if api := s.apis.API(m, p); api != emulator.Uncatalogued {
				s.metered[api], found = true, true
			}
		}
		if !found {
			s.apis.Add(p)
			s.metered[p] = true
		}
	}
	for tok, app := range opts.Tokens {
		s.tokens[tok] = holder{app: app}
	}
	s.latMax.Store(-1)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// SetLatencyMax changes the upper bound of the latency added to each
// request from now on: a network whose latency spread grows (or shrinks)
// mid-run.
func (s *Server) SetLatencyMax(d time.Duration) { s.latMax.Store(int64(d)) }

// Host is the emulator's "host:port", for the preset's Config.Hosts.
func (s *Server) Host() string {
	u, _ := url.Parse(s.URL)
	return u.Host
}

// Requests returns a copy of every request recorded so far, in arrival
// order.
func (s *Server) Requests() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// ForceBusy answers the next n API calls with the platform's "system busy":
// errcode -1 on the old API, HTTP 429 system.busy on the new one.
func (s *Server) ForceBusy(n int) { s.inject(n, fault{busy: true}) }

// Force503 answers the next n API calls with HTTP 503.
func (s *Server) Force503(n int) {
	s.inject(n, fault{status: http.StatusServiceUnavailable, body: `{"code":"ServiceUnavailable","message":"服务不可用"}`})
}

// FailNext answers the next n API calls with the given status and JSON body.
func (s *Server) FailNext(n, status int, body string) { s.inject(n, fault{status: status, body: body}) }

// FailNextIn answers the next n API calls of an ISV suite in customer org
// org with the given status and JSON body, and no other org's calls.
func (s *Server) FailNextIn(org string, n, status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.orgFaults == nil {
		s.orgFaults = make(map[string]*emulator.Faults[fault])
	}
	f := s.orgFaults[org]
	if f == nil {
		f = &emulator.Faults[fault]{}
		s.orgFaults[org] = f
	}
	f.Add(n, fault{status: status, body: body})
}

func (s *Server) inject(n int, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.Add(n, f)
}

// Ban bans the client's IP from now on for the (scaled) BanDuration, as if
// it had exceeded the per-IP limit.
func (s *Server) Ban() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.banUntil = s.opts.Clock().Add(s.scaled(s.opts.BanDuration))
	s.stats.Bans++
}

func (s *Server) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.opts.TimeScale)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	latMax := s.opts.LatencyMax
	if d := s.latMax.Load(); d >= 0 {
		latMax = max(time.Duration(d), s.opts.LatencyMin)
	}
	if !emulator.Delay(r, s.opts.LatencyMin, latMax) {
		return
	}
	a := s.decide(r)
	w.Header().Set("Content-Type", a.ctype)
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(a.body))
}

// decide counts the request against every limit at one instant of Clock,
// under the lock, and records it.
func (s *Server) decide(r *http.Request) answer {
	newAPI := strings.HasPrefix(r.URL.Path, "/v1.0/") || strings.HasPrefix(r.URL.Path, "/v2.0/")
	api := s.apis.API(r.Method, r.URL.Path)
	// Read the token before the lock: a form body may need parsing.
	tok := token(r, newAPI)
	var creds tokenRequest
	isTokenCall := isTokenPath(r.URL.Path)
	if isTokenCall {
		creds = readCreds(r)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock()
	rec := Record{At: now, Method: r.Method, Path: r.URL.Path, API: api}
	a := s.decideLocked(r, now, newAPI, api, tok, isTokenCall, creds, &rec)
	rec.Status, rec.Code = a.status, a.code
	s.records = append(s.records, rec)
	s.stats.Requests++
	return a
}

func (s *Server) decideLocked(r *http.Request, now time.Time, newAPI bool, api, tok string, isTokenCall bool, creds tokenRequest, rec *Record) answer {
	// The per-IP limit counts every call, token calls included.
	if now.Before(s.banUntil) {
		s.stats.BannedAnswers++
		return s.banAnswer()
	}
	win := now.UnixNano() / int64(s.opts.EgressWindow)
	if win != s.egressWin {
		s.egressWin, s.egress = win, 0
	}
	s.egress++
	if s.egress > s.opts.EgressLimit {
		s.banUntil = now.Add(s.scaled(s.opts.BanDuration))
		s.stats.Bans++
		s.stats.BannedAnswers++
		return s.banAnswer()
	}
	if isTokenCall {
		return s.issueToken(r.URL.Path, creds, rec)
	}
	if api == robotPath {
		return s.robotLocked(now, tok)
	}
	h, ok := s.tokens[tok]
	if !ok {
		h = holder{app: s.opts.DefaultApp}
	}
	app, org := h.app, h.org
	rec.App, rec.Org = app, org
	if app == "" {
		if newAPI {
			return jsonAnswer(http.StatusUnauthorized, "InvalidAuthentication",
				`{"code":"InvalidAuthentication","message":"不合法的access_token","requestid":"`+requestID()+`"}`)
		}
		return jsonAnswer(http.StatusOK, "40014", `{"errcode":40014,"errmsg":"不合法的access_token"}`)
	}
	if f, ok := s.faults.Next(); ok {
		s.stats.Injected++
		return faultAnswer(f, newAPI)
	}
	if of := s.orgFaults[org]; org != "" && of != nil {
		if f, ok := of.Next(); ok {
			s.stats.Injected++
			return faultAnswer(f, newAPI)
		}
	}
	// Per app, per API, per fixed wall-clock second; an API is a URL path,
	// whatever the method (the errors name the apiPath).
	if sec := now.Unix(); sec != s.qpsSecond {
		s.qpsSecond = sec
		clear(s.qps)
	}
	path := api
	if i := strings.IndexByte(api, ' '); i >= 0 {
		path = api[i+1:]
	}
	k := app + "\x00" + org + "\x00" + paramsUnnamed(path)
	s.qps[k]++
	if s.opts.AllQPS > 0 {
		// No app key holds a NUL: this key is no app's.
		all := "\x00all\x00" + paramsUnnamed(path)
		s.qps[all]++
		if s.qps[all] > s.opts.AllQPS {
			s.stats.Rejected++
			s.stats.AllRejected++
			return allAnswer(newAPI, r.URL.Path)
		}
	}
	if s.qps[k] > s.qpsOf(h) {
		s.stats.Rejected++
		return qpsAnswer(now, newAPI, r.URL.Path, org != "")
	}
	// The monthly quota counts metered calls that got through, per
	// organisation: an ISV token's customer org, the organisation an app's
	// token of the newer form names, else the app's own (the emulator knows
	// no org of an internal app's other tokens: each is its own).
	if s.opts.MonthlyQuota > 0 && s.metered[api] {
		payer := app
		if org != "" {
			payer = "org\x00" + org
		} else if h.corp != "" {
			payer = "org\x00" + h.corp
		}
		mk := payer + "\x00" + now.In(beijing).Format("2006-01")
		if s.month[mk] >= s.opts.MonthlyQuota {
			s.stats.Rejected++
			if newAPI {
				return jsonAnswer(http.StatusForbidden, "Forbidden.AccessDenied.ApiCountLimitForOrg",
					`{"code":"Forbidden.AccessDenied.ApiCountLimitForOrg","message":"The number of API calls of the organization has exceeded the monthly limit.","requestid":"`+requestID()+`"}`)
			}
			return wrapOld(r.URL.Path, "90020", "当前组织的API月调用量已超过上限")
		}
		s.month[mk]++
	}
	return success(r, newAPI)
}

// qpsOf is the per-API limit of a token's holder: per suite and org for an
// ISV token, per app otherwise.
func (s *Server) qpsOf(h holder) int {
	if h.org != "" {
		return s.opts.ISVQPS
	}
	if q, ok := s.opts.AppQPS[h.app]; ok && q > 0 {
		return q
	}
	return s.opts.QPS
}

// token finds the request's access token where each generation puts it.
func token(r *http.Request, newAPI bool) string {
	if newAPI {
		return r.Header.Get("x-acs-dingtalk-access-token")
	}
	if t := r.URL.Query().Get("access_token"); t != "" {
		return t
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return r.PostFormValue("access_token")
	}
	return ""
}

// paramsUnnamed is a template path with each {parameter} written {}: two
// templates of one path that name a parameter differently are one path.
func paramsUnnamed(path string) string {
	var b strings.Builder
	for path != "" {
		open := strings.IndexByte(path, '{')
		if open < 0 {
			b.WriteString(path)
			break
		}
		end := strings.IndexByte(path[open:], '}')
		if end < 0 {
			b.WriteString(path)
			break
		}
		b.WriteString(path[:open] + "{}")
		path = path[open+end+1:]
	}
	return b.String()
}
