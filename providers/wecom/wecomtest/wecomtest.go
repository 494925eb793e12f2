package wecomtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// Error codes the emulator answers with.
const (
	CodeOK            = 0
	CodeBusy          = -1
	CodeFreq          = 45009
	CodeConcurrent    = 45033
	CodeInvalidSecret = 40001
	CodeInvalidCorpID = 40013
	CodeBadToken      = 40014
	CodeTokenMissing  = 41001
	CodeExpiredToken  = 42001
)

// Limits are per API (URL path) and apply to every API alike. A value of 0
// or less disables that dimension.
type Limits struct {
	CorpPerMinute, CorpPerHour int // per company per API
	IPPerMinute, IPPerHour     int // per egress IP per API
	// MaxConcurrent caps the calls of one company to one API in flight at
	// once (45033 beyond it); 0 disables the cap.
	MaxConcurrent int
	// PerMemberPerMinute and PerMemberPerHour cap one app's messages
	// (/cgi-bin/message/send) to one member in calendar minutes and hours;
	// WeCom answers ok and drops the excess, which the emulator counts in
	// Request.Dropped. Zero disables either. Each name in touser is a
	// member; "@all", a party or a tag counts as one member of its own.
	PerMemberPerMinute, PerMemberPerHour int
}

// DefaultLimits returns the documented limits of a company's own apps.
func DefaultLimits() Limits {
	return Limits{CorpPerMinute: 10000, CorpPerHour: 150000, IPPerMinute: 20000, IPPerHour: 600000,
		PerMemberPerMinute: 30, PerMemberPerHour: 1000}
}

// ThirdPartyLimits returns the documented limits for third-party providers,
// whose egress IPs serve many companies.
func ThirdPartyLimits() Limits {
	return Limits{CorpPerMinute: 10000, CorpPerHour: 150000, IPPerMinute: 40000, IPPerHour: 1200000,
		PerMemberPerMinute: 30, PerMemberPerHour: 1000}
}

// Options configure a Server. The zero value is usable: default limits, any
// CorpID and secret accepted, the real clock, no latency.
type Options struct {
	// Limits, when zero, default to DefaultLimits().
	Limits Limits
	// Corps maps CorpID to the secrets of its apps; nil accepts any.
	Corps map[string][]string
	// CorpLimits replaces the company limits (CorpPerMinute, CorpPerHour)
	// of Limits for the companies it names.
	CorpLimits map[string]Limits
	// ClientIP names the egress IP of a request (default: the host of
	// RemoteAddr), so a test can emulate several egress IPs.
	ClientIP func(*http.Request) string
	// Clock is the source of time (default time.Now).
	Clock func() time.Time
	// TimeScale speeds up the emulator's own time: it reads
	// origin + (Clock() - origin) * TimeScale, where origin is Clock() when
	// the server starts. Windows (minute, hour), blocks after a 45009 (60 s
	// or 60 min) and token lifetimes are measured and aligned on that
	// emulated time, so with TimeScale 1000 a 60 s block lasts 60 ms of
	// Clock time. Latency and Hold are not scaled. Zero or less means 1.
	TimeScale float64
	// LatencyMin and LatencyMax delay each request's arrival by a uniform
	// random duration in [LatencyMin, LatencyMax] of real time.
	LatencyMin, LatencyMax time.Duration
	// Hold keeps each admitted API call in flight this long (real time)
	// after it is counted, for tests of MaxConcurrent.
	Hold time.Duration
	// TokenTTL is how long an access token lives (default 7200 s, emulated).
	TokenTTL time.Duration
	// Members are the company's members, whom "@all" reaches; Parties and
	// Tags map a party or tag ID to its members. An app message counts
	// once against each member it reaches, however addressed (a party or
	// tag not listed counts as one member of its own). Member IDs compare
	// without regard to case, as WeCom's UserIDs do.
	Members []string
	Parties map[string][]string
	Tags    map[string][]string
}

// Request is the record of one request the emulator answered.
type Request struct {
	At       time.Time // Clock() at arrival, after the latency
	Emulated time.Time // emulated time at arrival
	Method   string
	Path     string // URL path without the query
	API      string // the API the emulator counted the call under: its template, or "uncatalogued"
	Dropped  int    // members of an app message over their limit, to whom it was silently not delivered
	App      string // CorpID; empty when the token was unknown or the answer injected
	IP       string
	Status   int
	Code     int
}

// Counters sum up the answers given so far.
type Counters struct {
	Total  int
	OK     int
	ByCode map[int]int
}

// Server is a running emulator. Its URL is the base to send requests to.
type Server struct {
	*httptest.Server

	opts Options
	em   *emulator.Core[Request]
	apis *emulator.Templates // the emulator's own copy of WeCom's API templates

	// Guarded by em's lock.
	windows  map[key]*window
	blocked  map[key]time.Time // emulated end of a block
	inflight map[key]int
}

// key names one counter: a dimension ('c' company, 'i' IP, 'f' in flight),
// its id, the API, and the window length (zero for blocks and in-flight).
type key struct {
	dim      byte
	id, path string
	window   time.Duration
}

type window struct {
	start time.Time
	n     int
}

// NewServer starts an emulator; Close stops it.
func NewServer(opts Options) *Server {
	if opts.Limits == (Limits{}) {
		opts.Limits = DefaultLimits()
	}
	if opts.ClientIP == nil {
		opts.ClientIP = remoteHost
	}
	s := &Server{
		opts: opts,
		em: emulator.New[Request](emulator.Config{
			Clock: opts.Clock, TimeScale: opts.TimeScale, TokenTTL: opts.TokenTTL,
			TokenName: func(seq int, _ string) string {
				return fmt.Sprintf("%d_%016x%016x", seq, rand.Uint64(), rand.Uint64())
			},
		}),
		windows:  map[key]*window{},
		blocked:  map[key]time.Time{},
		inflight: map[key]int{},
		apis:     emulator.NewTemplates(templates),
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Now is the emulator's time (see Options.TimeScale).
func (s *Server) Now() time.Time { return s.em.Now() }

// Token issues an access token for corpID without calling gettoken.
func (s *Server) Token(corpID string) string { return s.em.Token(corpID) }

// InjectBusy makes the next n requests answer -1 "system busy".
func (s *Server) InjectBusy(n int) {
	s.Inject(n, http.StatusOK, `{"errcode":-1,"errmsg":"system busy"}`)
}

// Inject makes the next n requests answer status with body, uncounted.
// Injections queue up: a second one starts when the first is spent.
func (s *Server) Inject(n, status int, body string) {
	s.em.Inject(n, emulator.Fault{Status: status, Body: body})
}

// Requests returns a copy of the record of every request so far.
func (s *Server) Requests() []Request { return s.em.Requests() }

// Counters returns a copy of the counters.
func (s *Server) Counters() Counters { return Counters(s.em.Counters()) }

// maxMessageBody bounds what the emulator reads of an app message for its
// recipients: 2 MiB, above the largest message WeCom accepts.
const maxMessageBody = 2 << 20

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !emulator.Delay(r, s.opts.LatencyMin, s.opts.LatencyMax) {
		return
	}
	ip := s.opts.ClientIP(r)
	var msg appMessage
	if r.URL.Path == memberAPI {
		// As much as WeCom takes of a message (its text is up to 2,048
		// bytes, a news or template card more): a message cut short
		// decoded to no member, counted for none.
		_ = json.NewDecoder(io.LimitReader(r.Body, maxMessageBody)).Decode(&msg)
	}
	s.em.Lock()
	wall, emu := s.em.Times()
	rec := Request{At: wall, Emulated: emu, Method: r.Method, Path: r.URL.Path, API: s.apis.API(r.Method, r.URL.Path), IP: ip}
	status, body, release := s.answerLocked(r, &rec, emu)
	if rec.API == memberAPI && status == http.StatusOK && rec.Code == 0 {
		rec.Dropped = s.deliverLocked(rec.App, msg, emu)
	}
	rec.Status = status
	s.em.RecordLocked(rec, rec.Code)
	s.em.Unlock()

	if release != nil {
		if s.opts.Hold > 0 {
			time.Sleep(s.opts.Hold)
		}
		s.em.Lock()
		release()
		s.em.Unlock()
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// answerLocked decides one request under the lock. release, when not nil,
// ends the call's time in flight and must run under the lock.
func (s *Server) answerLocked(r *http.Request, rec *Request, emu time.Time) (status int, body string, release func()) {
	if in, ok := s.em.NextFaultLocked(); ok {
		rec.Code = emulator.Errcode(in.Body)
		return in.Status, in.Body, nil
	}
	q := r.URL.Query()
	var corp string
	switch r.URL.Path {
	case "/cgi-bin/service/get_suite_token", "/cgi-bin/service/get_corp_token":
		return s.thirdPartyLocked(r, rec, emu)
	}
	if r.URL.Path == "/cgi-bin/gettoken" {
		corp = q.Get("corpid")
		if code, msg := s.checkSecret(corp, q.Get("corpsecret")); code != 0 {
			rec.Code = code
			return http.StatusOK, errBody(code, msg, rec.IP), nil
		}
	} else {
		var st emulator.TokenState
		corp, st = s.em.CheckLocked(q.Get("access_token"), emu)
		switch st {
		case emulator.TokenMissing:
			rec.Code = CodeTokenMissing
			return http.StatusOK, errBody(CodeTokenMissing, "access_token missing", rec.IP), nil
		case emulator.TokenUnknown:
			rec.Code = CodeBadToken
			return http.StatusOK, errBody(CodeBadToken, "invalid access_token", rec.IP), nil
		case emulator.TokenExpired:
			rec.App, rec.Code = corp, CodeExpiredToken
			return http.StatusOK, errBody(CodeExpiredToken, "access_token expired", rec.IP), nil
		}
	}
	rec.App = corp
	if code := s.chargeLocked(corp, rec.IP, rec.API, emu); code != 0 {
		rec.Code = code
		msg := "api freq out of limit"
		if code == CodeConcurrent {
			msg = "api concurrent out of limit"
		}
		return http.StatusOK, errBody(code, msg, rec.IP), nil
	}
	if s.opts.Limits.MaxConcurrent > 0 {
		fk := key{dim: 'f', id: corp, path: rec.API}
		release = func() {
			if s.inflight[fk]--; s.inflight[fk] <= 0 {
				delete(s.inflight, fk)
			}
		}
	}
	if r.URL.Path == "/cgi-bin/gettoken" {
		tok, left := s.reuseLocked(corp+"\x00"+q.Get("corpsecret"), corp, emu)
		return http.StatusOK, fmt.Sprintf(`{"errcode":0,"errmsg":"ok","access_token":%q,"expires_in":%d}`,
			tok, left), release
	}
	return http.StatusOK, `{"errcode":0,"errmsg":"ok"}`, release
}

func (s *Server) checkSecret(corp, secret string) (int, string) {
	if corp == "" {
		return CodeInvalidCorpID, "invalid corpid"
	}
	if s.opts.Corps == nil {
		return 0, ""
	}
	secrets, ok := s.opts.Corps[corp]
	if !ok {
		return CodeInvalidCorpID, "invalid corpid"
	}
	for _, want := range secrets {
		if secret == want {
			return 0, ""
		}
	}
	return CodeInvalidSecret, "invalid secret"
}

// chargeLocked counts one call, or returns the code of the limit it hits.
// A window that overflows blocks its dimension (company or IP, for this
// API) for the window's length from that moment, as WeCom documents.
func (s *Server) chargeLocked(corp, ip, path string, emu time.Time) int {
	l := s.opts.Limits
	if cl, ok := s.opts.CorpLimits[corp]; ok {
		l.CorpPerMinute, l.CorpPerHour = cl.CorpPerMinute, cl.CorpPerHour
	}
	type check struct {
		dim    byte
		id     string
		limit  int
		window time.Duration
	}
	checks := [...]check{
		{'c', corp, l.CorpPerMinute, time.Minute},
		{'c', corp, l.CorpPerHour, time.Hour},
		{'i', ip, l.IPPerMinute, time.Minute},
		{'i', ip, l.IPPerHour, time.Hour},
	}
	for _, c := range checks[:] {
		if end, ok := s.blocked[key{dim: c.dim, id: c.id, path: path}]; ok {
			if emu.Before(end) {
				return CodeFreq
			}
			delete(s.blocked, key{dim: c.dim, id: c.id, path: path})
		}
	}
	var ws [len(checks)]*window
	for i, c := range checks {
		if c.limit <= 0 {
			continue
		}
		k := key{dim: c.dim, id: c.id, path: path, window: c.window}
		w := s.windows[k]
		if w == nil {
			w = &window{}
			s.windows[k] = w
		}
		if start := emu.Truncate(c.window); !w.start.Equal(start) {
			w.start, w.n = start, 0
		}
		if w.n >= c.limit {
			bk := key{dim: c.dim, id: c.id, path: path}
			if end := emu.Add(c.window); end.After(s.blocked[bk]) {
				s.blocked[bk] = end
			}
			return CodeFreq
		}
		ws[i] = w
	}
	if max := l.MaxConcurrent; max > 0 {
		fk := key{dim: 'f', id: corp, path: path}
		if s.inflight[fk] >= max {
			return CodeConcurrent
		}
		s.inflight[fk]++
	}
	for _, w := range ws {
		if w != nil {
			w.n++
		}
	}
	return 0
}

// errBody writes WeCom's error shape: the message, a hint, the caller's IP
// and a link to the error's page.
func errBody(code int, msg, ip string) string {
	hint := fmt.Sprintf("[%d_%d_%016x]", time.Now().Unix(), rand.IntN(100), rand.Uint64())
	return fmt.Sprintf(`{"errcode":%d,"errmsg":%q}`, code,
		fmt.Sprintf("%s, hint: %s, from ip: %s, more info at https://open.work.weixin.qq.com/devtool/query?e=%d", msg, hint, ip, code))
}

func remoteHost(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// thirdPartyLocked answers a third-party app's token calls: get_suite_token
// ({suite_id, suite_secret, suite_ticket}) issues the suite's own token, and
// get_corp_token?suite_access_token= ({auth_corpid, permanent_code}) a
// token for one authorised company, whose calls count against that
// company's limits. Suite secrets and permanent codes are taken on trust.
func (s *Server) thirdPartyLocked(r *http.Request, rec *Request, emu time.Time) (int, string, func()) {
	var body struct {
		SuiteID    string `json:"suite_id"`
		AuthCorpID string `json:"auth_corpid"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body)
	if r.URL.Path == "/cgi-bin/service/get_suite_token" {
		if body.SuiteID == "" {
			rec.Code = CodeInvalidCorpID
			return http.StatusOK, errBody(40082, "invalid suite_id", rec.IP), nil
		}
		tok, left := s.reuseLocked(suiteOwner+body.SuiteID, suiteOwner+body.SuiteID, emu)
		rec.App = suiteOwner + body.SuiteID
		return http.StatusOK, fmt.Sprintf(`{"errcode":0,"errmsg":"ok","suite_access_token":%q,"expires_in":%d}`, tok, left), nil
	}
	owner, st := s.em.CheckLocked(r.URL.Query().Get("suite_access_token"), emu)
	if st != emulator.TokenValid || !strings.HasPrefix(owner, suiteOwner) || body.AuthCorpID == "" {
		rec.Code = 42009
		return http.StatusOK, errBody(42009, "suite_access_token expired or invalid", rec.IP), nil
	}
	tok, left := s.reuseLocked(body.AuthCorpID, body.AuthCorpID, emu)
	rec.App = body.AuthCorpID
	return http.StatusOK, fmt.Sprintf(`{"errcode":0,"errmsg":"ok","access_token":%q,"expires_in":%d}`, tok, left), nil
}

// suiteOwner prefixes the owner of a suite's own token.
const suiteOwner = "suite:"
