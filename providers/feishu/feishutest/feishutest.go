package feishutest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// Beijing is China Standard Time (UTC+8, no daylight saving since 1991).
var Beijing = time.FixedZone("CST", 8*3600)

// Error codes the emulator answers with.
const (
	CodeOK            = 0
	CodeFrequency     = 99991400 // a level's per-second or per-minute cap
	CodeMonthlyQuota  = 99991403 // the tenant's monthly quota
	CodeChatFrequency = 230020   // IM: too many messages to one chat or user
	CodeTokenMissing  = 99991661
	CodeTokenInvalid  = 99991663
	CodeTokenExpired  = 99991677
	CodeInvalidApp    = 10003
	CodeInvalidSecret = 10014
	CodeBusy          = -1
)

// Messages of the error bodies.
const (
	MsgFrequency     = "request trigger frequency limit"
	MsgMonthlyQuota  = "request trigger tenant monthly quota limit"
	MsgChatFrequency = "This operation triggers the frequency limit."
)

// IMSend is the API of sending a message, which carries the per-chat rule.
const IMSend = "POST /open-apis/im/v1/messages"

// Forwards name their recipient like a send and count against it too.
const (
	imForward      = "POST /open-apis/im/v1/messages/:message_id/forward"
	imMergeForward = "POST /open-apis/im/v1/messages/merge_forward"
)

// Level is one row of Feishu's frequency level table. Zero means no cap.
type Level struct {
	PerSecond, PerMinute int
}

// levelTable returns Feishu's documented levels (standard edition: level 10
// is 100/s on the business edition).
func levelTable() map[int]Level {
	return map[int]Level{
		1: {PerMinute: 10}, 2: {PerMinute: 20}, 3: {PerMinute: 100},
		4: {PerSecond: 50, PerMinute: 1000}, 5: {PerSecond: 1}, 6: {PerSecond: 5},
		7: {PerSecond: 10}, 8: {PerSecond: 20}, 9: {PerSecond: 50},
		10: {PerSecond: 50}, 11: {PerSecond: 100}, 21: {PerSecond: 3},
	}
}

// defaultAPIs maps the APIs whose level the emulator knows, written
// "METHOD /path" with ":name" for a path parameter, to their level.
func defaultAPIs() map[string]int {
	return map[string]int{
		IMSend: 4,
		"POST /open-apis/im/v1/messages/:message_id/reply": 4,
	}
}

// Options configure a Server. The zero value is usable: the documented
// levels, any app accepted, the real clock, no latency, no monthly quota.
type Options struct {
	// Levels is the level table (default: Feishu's documented levels).
	Levels map[int]Level
	// APIs maps "METHOD /path" patterns to levels (default: IM send and reply at level 4).
	APIs map[string]int
	// DefaultLevel applies to APIs not in APIs (default 4, the level most
	// of Feishu's APIs document); -1 leaves them unlimited.
	DefaultLevel int
	// MonthlyQuota caps every tenant's calls per calendar month in Beijing
	// (the free edition's 10,000), whichever of its apps makes them; 0
	// leaves it unlimited.
	MonthlyQuota int
	// Tenants maps the app_id of an internal app to its tenant; an app not
	// in it is a tenant of its own. A store app's tenant is the tenant_key
	// of its token.
	Tenants map[string]string
	// PerChat caps messages per second sent to one receive_id through
	// IMSend, forwards and replies (default 5; negative disables). The
	// receive_id is read from the query, or else from the JSON body, as
	// Feishu takes it; a reply counts against the recipient of the message
	// it answers, which the emulator remembers from the message's send.
	// Sends, replies and forwards answer the new message (message_id,
	// chat_id, ...), and GET /open-apis/im/v1/messages/:message_id reads
	// it back; a reply to or read of a message the emulator did not create
	// for the app answers 230001.
	PerChat int
	// Apps maps app_id to app_secret; nil accepts any.
	Apps map[string]string
	// Clock is the source of time (default time.Now).
	Clock func() time.Time
	// TimeScale speeds up the emulator's own time: it reads
	// origin + (Clock() - origin) * TimeScale, where origin is Clock() when
	// the server starts. Windows (second, minute, month), token lifetimes and
	// the x-ogw-ratelimit-reset header are in emulated time, so with
	// TimeScale 1000 a minute passes in 60 ms of Clock time and a reset of
	// "1" means 1 ms. Latency is not scaled. Zero or less means 1.
	TimeScale float64
	// LatencyMin and LatencyMax delay each request's arrival by a uniform
	// random duration in [LatencyMin, LatencyMax] of real time.
	LatencyMin, LatencyMax time.Duration
	// TokenTTL is how long a tenant token lives (default 7200 s, emulated).
	TokenTTL time.Duration
}

// Request is the record of one request the emulator answered.
type Request struct {
	At       time.Time // Clock() at arrival, after the latency
	Emulated time.Time // emulated time at arrival
	Method   string
	Path     string // the API counted: the matched "METHOD /pattern" of Options.APIs or of the emulator's templates, or "METHOD uncatalogued"
	App      string // app_id, "<app_id>@<tenant_key>" for a store app's tenant; empty when the token was unknown or the answer injected
	// ReceiveID is the recipient of a message send or forward, as the
	// emulator read it from the query or the JSON body, and for a reply the
	// recipient of the message it answers: the one whose 5/s it counts
	// against.
	ReceiveID string
	Status    int
	Code      int
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

	opts     Options
	patterns []pattern
	apis     *emulator.Templates // the emulator's own copy of Feishu's API templates
	em       *emulator.Core[Request]

	// Guarded by em's lock.
	windows  map[key]*window
	messages map[string]*message // by message_id
}

type pattern struct {
	method string
	segs   []string
	level  int
	name   string
	params int
}

// key names one counter: app, API (or receive_id) and window kind.
type key struct {
	app, api string
	kind     byte // 's' second, 'm' minute, 'M' month, 'c' chat second
}

type window struct {
	start time.Time
	n     int
}

// NewServer starts an emulator; Close stops it.
func NewServer(opts Options) *Server {
	if opts.Levels == nil {
		opts.Levels = levelTable()
	}
	if opts.APIs == nil {
		opts.APIs = defaultAPIs()
	}
	if opts.PerChat == 0 {
		opts.PerChat = 5
	}
	if opts.DefaultLevel == 0 {
		opts.DefaultLevel = 4
	}
	s := &Server{
		opts: opts,
		em: emulator.New[Request](emulator.Config{
			Clock: opts.Clock, TimeScale: opts.TimeScale, TokenTTL: opts.TokenTTL,
			TokenName: func(seq int, _ string) string {
				return fmt.Sprintf("t-%d%016x", seq, rand.Uint64())
			},
		}),
		windows:  map[key]*window{},
		messages: map[string]*message{},
		apis:     emulator.NewTemplates(templates),
	}
	for name, level := range opts.APIs {
		method, path, _ := strings.Cut(name, " ")
		p := pattern{method: method, segs: strings.Split(path, "/"), level: level, name: name}
		for _, seg := range p.segs {
			if strings.HasPrefix(seg, ":") {
				p.params++
			}
		}
		s.patterns = append(s.patterns, p)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Now is the emulator's time (see Options.TimeScale).
func (s *Server) Now() time.Time { return s.em.Now() }

// Token issues a tenant access token for appID without calling the token
// endpoint.
func (s *Server) Token(appID string) string { return s.em.Token(appID) }

// InjectBusy makes the next n requests answer HTTP 500 with code -1.
func (s *Server) InjectBusy(n int) {
	s.Inject(n, http.StatusInternalServerError, nil, `{"code":-1,"msg":"system busy"}`)
}

// Inject makes the next n requests answer status, header and body,
// uncounted. Injections queue up: a second one starts when the first is spent.
func (s *Server) Inject(n, status int, header http.Header, body string) {
	s.em.Inject(n, emulator.Fault{Status: status, Header: header.Clone(), Body: body})
}

// Requests returns a copy of the record of every request so far.
func (s *Server) Requests() []Request { return s.em.Requests() }

// Counters returns a copy of the counters.
func (s *Server) Counters() Counters { return Counters(s.em.Counters()) }

// reply is one answer: status, extra headers, code and body.
type reply struct {
	status int
	header http.Header
	code   int
	body   string
}

func errReply(status, code int, msg string) reply {
	return reply{status: status, code: code, body: fmt.Sprintf(`{"code":%d,"msg":%q}`, code, msg)}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !emulator.Delay(r, s.opts.LatencyMin, s.opts.LatencyMax) {
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.em.Lock()
	wall, emu := s.em.Times()
	api, level := s.match(r.Method, r.URL.Path)
	rec := Request{At: wall, Emulated: emu, Method: r.Method, Path: api}
	rp := s.answerLocked(r, body, &rec, api, level, emu)
	rec.Status, rec.Code = rp.status, rp.code
	s.em.RecordLocked(rec, rec.Code)
	s.em.Unlock()

	for k, vs := range rp.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
}

// match names the API of a request and its level: the most specific
// pattern of Options.APIs that matches it, else its template at the default
// level, else "METHOD uncatalogued" at the default level.
func (s *Server) match(method, path string) (string, int) {
	segs := strings.Split(path, "/")
	best, bestLevel, bestParams := "", s.opts.DefaultLevel, math.MaxInt
next:
	for _, p := range s.patterns {
		if p.method != method || len(p.segs) != len(segs) || p.params >= bestParams {
			continue
		}
		for i, seg := range p.segs {
			if seg != segs[i] && !(strings.HasPrefix(seg, ":") && segs[i] != "") {
				continue next
			}
		}
		best, bestLevel, bestParams = p.name, p.level, p.params
	}
	if best == "" {
		if api := s.apis.API(method, path); api != emulator.Uncatalogued {
			return api, s.opts.DefaultLevel
		}
		return method + " " + emulator.Uncatalogued, s.opts.DefaultLevel
	}
	return best, bestLevel
}

func (s *Server) answerLocked(r *http.Request, body []byte, rec *Request, api string, level int, emu time.Time) reply {
	if in, ok := s.em.NextFaultLocked(); ok {
		return reply{status: in.Status, header: in.Header, code: emulator.Code(in.Body), body: in.Body}
	}
	switch r.URL.Path {
	case "/open-apis/auth/v3/tenant_access_token/internal":
		return s.tokenLocked(body, rec, emu, "tenant_access_token")
	case "/open-apis/auth/v3/app_access_token/internal":
		// A self-built app's app token: the same exchange, named so.
		return s.tokenLocked(body, rec, emu, "app_access_token")
	case "/open-apis/auth/v3/app_access_token", "/open-apis/auth/v3/tenant_access_token":
		return s.storeTokenLocked(r.URL.Path, body, rec, emu)
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		tok = "" // no Bearer scheme, no token
	}
	app, st := s.em.CheckLocked(tok, emu)
	switch st {
	case emulator.TokenMissing:
		return errReply(http.StatusBadRequest, CodeTokenMissing,
			"Missing access token for authorization. Please make a request with token attached.")
	case emulator.TokenUnknown:
		return errReply(http.StatusBadRequest, CodeTokenInvalid,
			"Invalid access token for authorization. Please make a request with token attached.")
	}
	rec.App = app
	if st == emulator.TokenExpired {
		return errReply(http.StatusBadRequest, CodeTokenExpired, "Authentication token expired.")
	}
	var chat string
	var parent *message
	switch api {
	case IMSend, imForward, imMergeForward:
		chat = r.URL.Query().Get("receive_id")
		if chat == "" {
			var m struct {
				ReceiveID string `json:"receive_id"`
			}
			_ = json.Unmarshal(body, &m)
			chat = m.ReceiveID
		}
	case imReply, imGetMessage:
		var ok bool
		if parent, ok = s.parentLocked(app, r.URL.Path); !ok {
			return errReply(http.StatusBadRequest, CodeInvalidMessage, "invalid message_id")
		}
		if api == imReply {
			chat = parent.recipient // the answered message's chat, as a send to it counts
		}
	}
	rec.ReceiveID = chat
	rp := s.chargeLocked(app, api, s.opts.Levels[level], chat, emu)
	if rp.code != CodeOK {
		return rp
	}
	switch api {
	case IMSend, imForward, imMergeForward:
		return messageReply(api, s.createLocked(r, body, app, chat, nil, emu))
	case imReply:
		return messageReply(api, s.createLocked(r, body, app, chat, parent, emu))
	case imGetMessage:
		return messageReply(api, parent)
	}
	return rp
}

// tokenLocked answers a self-built app's token exchange, the token under
// field (tenant_access_token or app_access_token).
func (s *Server) tokenLocked(body []byte, rec *Request, emu time.Time, field string) reply {
	var req struct {
		AppID     string `json:"app_id"`
		AppSecret string `json:"app_secret"`
	}
	_ = json.NewDecoder(bytes.NewReader(body)).Decode(&req)
	if req.AppID == "" {
		return errReply(http.StatusBadRequest, CodeInvalidApp, "invalid param")
	}
	if s.opts.Apps != nil {
		want, ok := s.opts.Apps[req.AppID]
		if !ok {
			return errReply(http.StatusBadRequest, CodeInvalidApp, "invalid param")
		}
		if want != req.AppSecret {
			return errReply(http.StatusBadRequest, CodeInvalidSecret, "app secret invalid")
		}
	}
	rec.App = req.AppID
	tok, left := s.reuseLocked(req.AppID, emu)
	return reply{status: http.StatusOK, body: fmt.Sprintf(`{"code":0,"msg":"ok",%q:%q,"expire":%d}`,
		field, tok, left)}
}

// tenantOf is the tenant whose monthly quota app's calls count against:
// a store app's tenant_key ("<app_id>@<tenant_key>"), else Options.Tenants'
// entry, else the app alone.
func (s *Server) tenantOf(app string) string {
	if i := strings.LastIndexByte(app, '@'); i >= 0 {
		return app[i+1:]
	}
	if t, ok := s.opts.Tenants[app]; ok {
		return t
	}
	return app
}

// chargeLocked counts one call, or answers the limit it hits.
func (s *Server) chargeLocked(app, api string, lv Level, chat string, emu time.Time) reply {
	b := emu.In(Beijing)
	y, m, _ := b.Date()
	month := time.Date(y, m, 1, 0, 0, 0, 0, Beijing)
	sec := emu.Truncate(time.Second)
	type check struct {
		k     key
		limit int
		start time.Time
		end   time.Time
	}
	checks := [...]check{
		{key{"tenant:" + s.tenantOf(app), "", 'M'}, s.opts.MonthlyQuota, month, month.AddDate(0, 1, 0)},
		{key{app, api, 's'}, lv.PerSecond, sec, sec.Add(time.Second)},
		{key{app, api, 'm'}, lv.PerMinute, emu.Truncate(time.Minute), emu.Truncate(time.Minute).Add(time.Minute)},
		{key{app, chat, 'c'}, s.opts.PerChat, sec, sec.Add(time.Second)},
	}
	if chat == "" {
		checks[3].limit = 0
	}
	var ws [len(checks)]*window
	for i, c := range checks {
		if c.limit <= 0 {
			continue
		}
		w := s.windows[c.k]
		if w == nil {
			w = &window{}
			s.windows[c.k] = w
		}
		if !w.start.Equal(c.start) {
			w.start, w.n = c.start, 0
		}
		if w.n < c.limit {
			ws[i] = w
			continue
		}
		switch c.k.kind {
		case 'M':
			return errReply(http.StatusTooManyRequests, CodeMonthlyQuota, MsgMonthlyQuota)
		case 'c':
			return errReply(http.StatusBadRequest, CodeChatFrequency, MsgChatFrequency)
		}
		rp := errReply(http.StatusTooManyRequests, CodeFrequency, MsgFrequency)
		reset := int(math.Ceil(c.end.Sub(emu).Seconds()))
		rp.header = http.Header{
			"X-Ogw-Ratelimit-Limit": {strconv.Itoa(c.limit)},
			"X-Ogw-Ratelimit-Reset": {strconv.Itoa(max(reset, 1))},
		}
		return rp
	}
	for _, w := range ws {
		if w != nil {
			w.n++
		}
	}
	return reply{status: http.StatusOK, body: `{"code":0,"msg":"success","data":{}}`}
}

// storeTokenLocked answers a store app's token calls: app_access_token
// ({app_id, app_secret, app_ticket}) issues the app's own token, and
// tenant_access_token ({app_access_token, tenant_key}) a token for one
// tenant that installed the app, whose calls count per app per tenant
// (owner "<app_id>@<tenant_key>"). Tickets are taken on trust.
func (s *Server) storeTokenLocked(path string, body []byte, rec *Request, emu time.Time) reply {
	var req struct {
		AppID     string `json:"app_id"`
		AppSecret string `json:"app_secret"`
		AppToken  string `json:"app_access_token"`
		TenantKey string `json:"tenant_key"`
	}
	_ = json.Unmarshal(body, &req)
	if path == "/open-apis/auth/v3/app_access_token" {
		if req.AppID == "" || (s.opts.Apps != nil && s.opts.Apps[req.AppID] != req.AppSecret) {
			return errReply(http.StatusBadRequest, CodeInvalidSecret, "app secret invalid")
		}
		rec.App = req.AppID
		tok, left := s.reuseLocked(appOwner+req.AppID, emu)
		return reply{status: http.StatusOK, body: fmt.Sprintf(`{"code":0,"msg":"ok","app_access_token":%q,"expire":%d}`, tok, left)}
	}
	owner, st := s.em.CheckLocked(req.AppToken, emu)
	app, isApp := strings.CutPrefix(owner, appOwner)
	if st != emulator.TokenValid || !isApp || req.TenantKey == "" {
		return errReply(http.StatusBadRequest, CodeTokenInvalid, "invalid app_access_token or tenant_key")
	}
	rec.App = app + "@" + req.TenantKey
	tok, left := s.reuseLocked(rec.App, emu)
	return reply{status: http.StatusOK, body: fmt.Sprintf(`{"code":0,"msg":"ok","tenant_access_token":%q,"expire":%d}`, tok, left)}
}

// appOwner prefixes the owner of a store app's own token, which calls no
// API.
const appOwner = "app:"
