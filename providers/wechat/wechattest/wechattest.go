package wechattest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// Beijing is China Standard Time. China has kept UTC+8 without daylight
// saving since 1991, so a fixed zone needs no tzdata on the test machine.
var Beijing = time.FixedZone("CST", 8*3600)

// Error codes the emulator answers with.
const (
	CodeOK            = 0
	CodeBusy          = -1
	CodeDailyQuota    = 45009
	CodeMinuteQuota   = 45011
	CodeMiniFrequency = 44991
	CodeInvalidToken  = 40001
	CodeExpiredToken  = 42001
	CodeBadToken      = 40014
	CodeTokenMissing  = 41001
	CodeInvalidAppID  = 40013
	CodeInvalidSecret = 40125
)

// Messages, as WeChat writes them; the emulator appends " rid: <id>".
const (
	MsgDailyQuota    = "reach max api daily quota limit"
	MsgMinuteQuota   = "api minute-quota reach limit, must slower, retry next minute"
	MsgMiniFrequency = "api freq out of limit"
	MsgBusy          = "system error"
)

// Limits are the quotas the emulator enforces per AppID, keyed by API path
// (e.g. "/cgi-bin/message/custom/send"). A path absent from a map, or mapped
// to 0 or less, is unlimited in that dimension.
type Limits struct {
	// Daily is each API's quota per calendar day (Asia/Shanghai); calls
	// beyond it answer 45009 until midnight.
	Daily map[string]int
	// PerMinute is each API's limit per calendar minute; calls beyond it
	// answer 45011 until the next minute.
	PerMinute map[string]int
	// MiniPerMinute is like PerMinute for the Mini Program APIs that answer
	// 44991 instead.
	MiniPerMinute map[string]int
	// ForceRefreshDaily is how many stable_token exchanges with
	// force_refresh renew the token a day (Asia/Shanghai); the next ones
	// answer 45009 until midnight (WeChat publishes the limit, not its
	// answer: this is the emulator's reading). 0: unlimited.
	ForceRefreshDaily int
	// ForceRefreshGap is how long after a forced refresh another one
	// returns the token in force without renewing it, and without counting
	// (WeChat: "otherwise it does not refresh"). 0: none.
	ForceRefreshGap time.Duration
}

// DefaultLimits returns the documented quotas of a new account.
func DefaultLimits() Limits {
	return Limits{
		Daily: map[string]int{
			"/cgi-bin/token":                2000,
			"/cgi-bin/stable_token":         500000,
			"/cgi-bin/menu/create":          1000,
			"/cgi-bin/message/custom/send":  500000,
			"/cgi-bin/message/mass/sendall": 100,
			"/cgi-bin/user/info":            5000000,
			"/cgi-bin/qrcode/create":        100000,
		},
		PerMinute:         map[string]int{"/cgi-bin/stable_token": 10000},
		ForceRefreshDaily: 20,
		ForceRefreshGap:   30 * time.Second,
	}
}

// Options configure a Server. The zero value is usable: default limits, any
// AppID and secret accepted, the real clock, no latency.
type Options struct {
	// Limits, when all three maps are nil, default to DefaultLimits().
	Limits Limits
	// AppLimits replaces Limits for the AppIDs it names: accounts whose
	// quotas WeChat raised.
	AppLimits map[string]Limits
	// Apps maps AppID to AppSecret; nil accepts any AppID with any secret.
	Apps map[string]string
	// Clock is the source of time (default time.Now).
	Clock func() time.Time
	// TimeScale speeds up the emulator's own time: it reads
	// origin + (Clock() - origin) * TimeScale, where origin is Clock() when
	// the server starts. Every window (minute, day), token lifetime and
	// penalty is measured and aligned on that emulated time, so with
	// TimeScale 1000 a minute passes in 60 ms of Clock time. Latency is not
	// scaled. Zero or less means 1.
	TimeScale float64
	// LatencyMin and LatencyMax delay each request's arrival by a uniform
	// random duration in [LatencyMin, LatencyMax] of real time, before it is
	// counted: the network's varying latency that moves calls across the
	// provider's window boundaries.
	LatencyMin, LatencyMax time.Duration
	// TokenTTL is how long an issued access token lives (default 7200 s of
	// emulated time).
	TokenTTL time.Duration
	// TokenGrace is how long a token keeps working once a fetch of
	// /cgi-bin/token (or a forced stable_token) replaced it (default 5
	// minutes of emulated time, as WeChat documents).
	TokenGrace time.Duration
}

// Request is the record of one request the emulator answered.
type Request struct {
	At       time.Time // Clock() at arrival, after the latency
	Emulated time.Time // emulated time at arrival (see Options.TimeScale)
	Method   string
	Path     string // URL path, without the query
	API      string // the API the emulator counted the call under: its template, or "uncatalogued"
	App      string // AppID; empty when the token was unknown or the answer injected
	Status   int
	Code     int // errcode of the answer
}

// Counters sum up the answers given so far.
type Counters struct {
	Total  int
	OK     int         // errcode 0
	ByCode map[int]int // every non-zero errcode
}

// Server is a running emulator. Its URL is the base to send requests to.
type Server struct {
	*httptest.Server

	opts Options
	em   *emulator.Core[Request]
	apis *emulator.Templates // the emulator's own copy of WeChat's API templates

	// Guarded by em's lock.
	windows map[windowKey]*window
	issued  tokenState // what a second exchange does (tokens.go)
}

type windowKey struct {
	app, path string
	kind      byte // 'd' day, 'm' minute, 'n' mini minute, 'c' a month's clears (clear.go)
}

type window struct {
	start time.Time
	n     int
}

// NewServer starts an emulator; Close stops it.
func NewServer(opts Options) *Server {
	if opts.Limits.Daily == nil && opts.Limits.PerMinute == nil && opts.Limits.MiniPerMinute == nil {
		opts.Limits = DefaultLimits()
	}
	s := &Server{
		opts: opts,
		em: emulator.New[Request](emulator.Config{
			Clock: opts.Clock, TimeScale: opts.TimeScale, TokenTTL: opts.TokenTTL,
			TokenName: func(seq int, app string) string {
				return fmt.Sprintf("%d_%s_%016x", seq, app, rand.Uint64())
			},
		}),
		windows: map[windowKey]*window{},
		apis:    emulator.NewTemplates(templates),
	}
	// A path the options limit is an API, catalogued or not.
	for _, m := range []map[string]int{opts.Limits.Daily, opts.Limits.PerMinute, opts.Limits.MiniPerMinute} {
		for path := range m {
			if s.apis.API(http.MethodPost, path) != path {
				s.apis.Add(path)
			}
		}
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Now is the emulator's time (see Options.TimeScale).
func (s *Server) Now() time.Time { return s.em.Now() }

// Token issues an access token for appID without calling the token
// endpoint (and without counting against its quota).
func (s *Server) Token(appID string) string { return s.em.Token(appID) }

// InjectBusy makes the next n requests answer -1 "system error".
func (s *Server) InjectBusy(n int) {
	s.Inject(n, http.StatusOK, errBody(CodeBusy, MsgBusy))
}

// Inject makes the next n requests answer status with body, uncounted.
// Injections queue up: a second one starts when the first is spent.
func (s *Server) Inject(n, status int, body string) {
	s.em.Inject(n, emulator.Fault{Status: status, Body: body})
}

// ClearQuota resets every API's daily count of appID, as a successful
// clear_quota call does (see ClearQuotaPath), without counting against the
// month's clears: the account's owner clearing it from outside the fleet.
// Per-minute counts are left, as WeChat's clear leaves them.
func (s *Server) ClearQuota(appID string) {
	s.em.Lock()
	defer s.em.Unlock()
	s.clearDailyLocked(appID, "")
}

// Requests returns a copy of the record of every request so far.
func (s *Server) Requests() []Request { return s.em.Requests() }

// Counters returns a copy of the counters.
func (s *Server) Counters() Counters { return Counters(s.em.Counters()) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !emulator.Delay(r, s.opts.LatencyMin, s.opts.LatencyMax) {
		return
	}
	// Token requests carry their credentials in the body, quota requests
	// their target; read it before taking the lock, so that a slow sender
	// holds up no other request.
	var stable stableTokenRequest
	var quota quotaRequest
	var clearReq clearQuotaRequest
	switch r.URL.Path {
	case "/cgi-bin/stable_token":
		_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&stable)
	case QuotaGetPath, QuotaClearPath:
		_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&quota)
	case ClearQuotaPath:
		_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&clearReq)
	}
	s.em.Lock()
	wall, emu := s.em.Times()
	rec := Request{At: wall, Emulated: emu, Method: r.Method, Path: r.URL.Path, API: s.apis.API(r.Method, r.URL.Path)}
	status, body := s.answerLocked(r, &rec, emu, stable, quota, clearReq)
	rec.Status = status
	s.em.RecordLocked(rec, rec.Code)
	s.em.Unlock()

	w.Header().Set("Content-Type", "application/json; encoding=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

type stableTokenRequest struct {
	GrantType    string `json:"grant_type"`
	AppID        string `json:"appid"`
	Secret       string `json:"secret"`
	ForceRefresh bool   `json:"force_refresh"`
}

// answerLocked decides one request under the lock and fills rec.App and
// rec.Code.
func (s *Server) answerLocked(r *http.Request, rec *Request, emu time.Time, stable stableTokenRequest, quota quotaRequest, clearReq clearQuotaRequest) (int, string) {
	if in, ok := s.em.NextFaultLocked(); ok {
		rec.Code = emulator.Errcode(in.Body)
		return in.Status, in.Body
	}
	q := r.URL.Query()
	switch r.URL.Path {
	case "/cgi-bin/token":
		return s.tokenLocked(rec, emu, q.Get("appid"), q.Get("secret"), false, false)
	case "/cgi-bin/stable_token":
		if r.Method != http.MethodPost {
			rec.Code = 43002
			return http.StatusOK, errBody(43002, "require POST method")
		}
		return s.tokenLocked(rec, emu, stable.AppID, stable.Secret, true, stable.ForceRefresh)
	}
	app, st := s.em.CheckLocked(q.Get("access_token"), emu)
	if st == emulator.TokenValid && !s.issued.validLocked(q.Get("access_token"), emu) {
		st = emulator.TokenUnknown // replaced past its grace, or revoked
	}
	switch st {
	case emulator.TokenMissing:
		rec.Code = CodeTokenMissing
		return http.StatusOK, errBody(CodeTokenMissing, "access_token missing")
	case emulator.TokenUnknown:
		rec.Code = CodeInvalidToken
		return http.StatusOK, errBody(CodeInvalidToken, "invalid credential, access_token is invalid or not latest")
	case emulator.TokenExpired:
		rec.App = app
		rec.Code = CodeExpiredToken
		return http.StatusOK, errBody(CodeExpiredToken, "access_token expired")
	}
	rec.App = app
	// The clears are limited by the month alone (clear.go).
	switch r.URL.Path {
	case ClearQuotaPath:
		return s.clearQuotaLocked(rec, app, clearReq.AppID, emu)
	case QuotaClearPath:
		return s.quotaClearLocked(rec, app, quota.CGIPath, emu)
	}
	if code, msg := s.chargeLocked(app, rec.API, emu); code != 0 {
		rec.Code = code
		return http.StatusOK, errBody(code, msg)
	}
	if r.URL.Path == QuotaGetPath {
		return s.quotaLocked(rec, app, quota.CGIPath, emu)
	}
	return http.StatusOK, `{"errcode":0,"errmsg":"ok"}`
}

func (s *Server) tokenLocked(rec *Request, emu time.Time, app, secret string, stable, force bool) (int, string) {
	if app == "" {
		rec.Code = CodeInvalidAppID
		return http.StatusOK, errBody(CodeInvalidAppID, "invalid appid")
	}
	if s.opts.Apps != nil {
		want, ok := s.opts.Apps[app]
		if !ok {
			rec.Code = CodeInvalidAppID
			return http.StatusOK, errBody(CodeInvalidAppID, "invalid appid")
		}
		if secret != want {
			rec.Code = CodeInvalidSecret
			return http.StatusOK, errBody(CodeInvalidSecret, "invalid appsecret")
		}
	}
	rec.App = app
	if code, msg := s.chargeLocked(app, rec.API, emu); code != 0 {
		rec.Code = code
		return http.StatusOK, errBody(code, msg)
	}
	if stable && force {
		var refused bool
		if force, refused = s.forceLocked(app, emu); refused {
			rec.Code = CodeDailyQuota
			return http.StatusOK, errBody(CodeDailyQuota, MsgDailyQuota)
		}
	}
	tok, left := s.issueLocked(app, emu, stable, force)
	return http.StatusOK, fmt.Sprintf(`{"access_token":%q,"expires_in":%d}`, tok, int(left/time.Second))
}

// chargeLocked counts one call of app to path, or names the limit it
// exceeds; a rejected call is not counted.
func (s *Server) chargeLocked(app, path string, emu time.Time) (int, string) {
	b := emu.In(Beijing)
	y, m, d := b.Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, Beijing)
	minute := b.Truncate(time.Minute)
	type check struct {
		kind  byte
		limit int
		start time.Time
		code  int
		msg   string
	}
	lim := s.limitsOf(app)
	checks := [...]check{
		{'d', lim.Daily[path], day, CodeDailyQuota, MsgDailyQuota},
		{'m', lim.PerMinute[path], minute, CodeMinuteQuota, MsgMinuteQuota},
		{'n', lim.MiniPerMinute[path], minute, CodeMiniFrequency, MsgMiniFrequency},
	}
	var ws [len(checks)]*window
	for i, c := range checks {
		if c.limit <= 0 {
			continue
		}
		k := windowKey{app: app, path: path, kind: c.kind}
		w := s.windows[k]
		if w == nil {
			w = &window{}
			s.windows[k] = w
		}
		if !w.start.Equal(c.start) {
			w.start, w.n = c.start, 0
		}
		if w.n >= c.limit {
			return c.code, c.msg
		}
		ws[i] = w
	}
	for _, w := range ws {
		if w != nil {
			w.n++
		}
	}
	return 0, ""
}

// limitsOf is the quotas of app: its own if WeChat raised them.
func (s *Server) limitsOf(app string) Limits {
	if l, ok := s.opts.AppLimits[app]; ok {
		return l
	}
	return s.opts.Limits
}

// errBody writes WeChat's error shape; every errmsg ends with a request id.
func errBody(code int, msg string) string {
	rid := fmt.Sprintf("%08x-%08x-%08x", rand.Uint32(), rand.Uint32(), rand.Uint32())
	return fmt.Sprintf(`{"errcode":%d,"errmsg":%q}`, code, msg+" rid: "+rid)
}

// QuotaGetPath is WeChat's quota query: POST {"cgi_path": ...} answers the
// API's daily quota, the calls counted today and what remains. The query
// itself is counted like any API (a Daily or PerMinute limit on this path
// applies to it).
const QuotaGetPath = "/cgi-bin/openapi/quota/get"

// CodeQuotaBadPath answers a quota query for a path without a daily quota.
const CodeQuotaBadPath = 76021

type quotaRequest struct {
	CGIPath string `json:"cgi_path"`
}

// quotaLocked answers a quota query from the emulator's own counts: the
// app's daily limit of the path and today's count (Asia/Shanghai), which
// includes the calls Spend recorded for other clients.
func (s *Server) quotaLocked(rec *Request, app, path string, emu time.Time) (int, string) {
	lim := s.limitsOf(app)
	limit := lim.Daily[path]
	if path == "" || limit <= 0 {
		rec.Code = CodeQuotaBadPath
		return http.StatusOK, errBody(CodeQuotaBadPath, "invalid cgi_path")
	}
	used := 0
	if w := s.windows[windowKey{app: app, path: path, kind: 'd'}]; w != nil && w.start.Equal(beijingDay(emu)) {
		used = w.n
	}
	return http.StatusOK, fmt.Sprintf(`{"errcode":0,"errmsg":"ok","quota":{"daily_limit":%d,"used":%d,"remain":%d},"rate_limit":{"call_count":%d,"refresh_second":60}}`,
		limit, used, max(limit-used, 0), lim.PerMinute[path])
}

// Spend counts n calls of appID to path today as made by another client
// sharing the AppID (up to the daily quota): calls the Transport under test
// never saw, which quota/get reports and the daily quota refuses.
func (s *Server) Spend(appID, path string, n int) {
	s.em.Lock()
	defer s.em.Unlock()
	_, emu := s.em.Times()
	k := windowKey{app: appID, path: path, kind: 'd'}
	w := s.windows[k]
	if w == nil {
		w = &window{}
		s.windows[k] = w
	}
	if day := beijingDay(emu); !w.start.Equal(day) {
		w.start, w.n = day, 0
	}
	w.n += n
}

// beijingDay is the start of t's calendar day in Asia/Shanghai.
func beijingDay(t time.Time) time.Time {
	y, m, d := t.In(Beijing).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, Beijing)
}
