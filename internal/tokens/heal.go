package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/internal/tokenform"
	"github.com/quotaware/throttle/providers"
)

// maxErrorBody bounds what is read of an answer to a handed-out token: the
// providers' error bodies are a few dozen bytes, their code first.
const maxErrorBody = 4 << 10

// watch sends a request and, when it carries a token this replica handed
// out and the provider answers that the token is invalid or expired,
// deletes the kept answer it came from. A request carrying a token the
// provider refused since goes with the fleet's current one (sendRefused).
func (s *Sharer) watch(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	tok := tokenform.FromRequest(req)
	if tok == "" && req.URL != nil {
		// A WeCom suite's token, which names the suite in its calls.
		tok = tokenform.QueryValue(req.URL.RawQuery, "suite_access_token")
	}
	inBody := false
	if tok == "" {
		// DingTalk's old API takes the token as a form field too.
		tok = tokenform.FormBody(req)
		inBody = tok != ""
	}
	if tok == "" {
		return base.RoundTrip(req)
	}
	s.mu.Lock()
	provider, handed := s.handedFor(tok)
	var d *deadToken
	if !handed {
		d = s.dead[tok]
	}
	s.mu.Unlock()
	switch {
	case handed:
		return s.sendWatched(base, req, tok, provider)
	case d != nil && inBody:
		// Not sent with another token: the body is the SDK's as it built
		// it. A refusal still heals, within the caps.
		resp, refused, err := sendChecked(base, req, d.provider)
		if refused {
			s.healAgain(req.Context(), d)
		}
		return resp, err
	case d != nil:
		return s.sendRefused(base, req, tok, d)
	}
	return base.RoundTrip(req)
}

// sendChecked sends req and reports whether the provider (named provider)
// answered that the token it carries is invalid or expired.
func sendChecked(base http.RoundTripper, req *http.Request, provider string) (resp *http.Response, refused bool, err error) {
	resp, err = base.RoundTrip(req)
	if err != nil {
		return resp, false, err
	}
	raw, _ := providers.PeekBody(resp, maxErrorBody)
	return resp, invalidToken(provider, resp.StatusCode, raw), nil
}

// handedFor returns the provider of tok when this replica handed it out.
// Called with s.mu held: remember rewrites the entries.
func (s *Sharer) handedFor(tok string) (provider string, ok bool) {
	hs, ok := s.handed[tok]
	if !ok {
		return "", false
	}
	return hs[0].provider, true
}

// sendWatched sends req, which carries tok, handed out for provider, and
// heals tok when the provider refuses it.
func (s *Sharer) sendWatched(base http.RoundTripper, req *http.Request, tok, provider string) (*http.Response, error) {
	resp, refused, err := sendChecked(base, req, provider)
	if refused {
		s.heal(req.Context(), tok, hostOf(req))
	}
	return resp, err
}

// heal deletes every kept answer that handed tok out (one token may come
// from several exchanges), compared on the token's hash: a
// newer answer another replica stored in the meantime stays. Heals of one
// credential are capped for the fleet (WithHealLimits: by default one in
// 30 s and 20 a day, WeChat's cap on forced refreshes), so that a service
// outside the fleet that keeps invalidating the token cannot turn healing
// into a storm of fetches: past the cap, the kept answer stays until it
// ends or the cap allows, when the next refusal of the token heals it
// (healAgain).
func (s *Sharer) heal(ctx context.Context, tok, host string) {
	s.mu.Lock()
	hs := s.handed[tok]
	delete(s.handed, tok)
	s.bury(tok, hs, host)
	s.nHand.Store(int32(len(s.handed) + len(s.dead)))
	s.mu.Unlock()
	s.healAnswers(ctx, hs)
}

// healAnswers heals the kept answers hs of one token. On the caller's way
// back with the provider's answer: bounded as an exchange's Redis calls
// are, each heal's three calls at most, whether the caller waits or not.
func (s *Sharer) healAnswers(ctx context.Context, hs []handed) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*peekTimeout)
	defer cancel()
	for _, h := range hs {
		s.healAnswer(ctx, h)
	}
}

// healAnswer deletes one kept answer of a token, within the caps.
func (s *Sharer) healAnswer(ctx context.Context, h handed) {
	// Only a kept answer of this token is healed: read it before spending
	// the cap (the delete compares again).
	v, err := s.rdb.Get(ctx, h.key).Bytes()
	if err != nil || len(v) < len(h.tag) || string(v[:len(h.tag)]) != string(h.tag) {
		return
	}
	// Another replica healing this very token (healSame) may not have
	// deleted it yet: delete it here too, before the SDK exchanges again.
	switch s.mayHeal(ctx, h) {
	case healCapped:
		s.count(h.provider, Capped)
		return
	case healFailed:
		// Not a cap: counted Capped, it warned of something outside the
		// fleet invalidating tokens. Tried again on the next refusal.
		return
	}
	if n, err := s.rdb.Eval(ctx, healLua, []string{h.key}, h.tag).Int(); err == nil && n == 1 {
		s.count(h.provider, Healed)
	}
}

// What mayHeal decides.
const (
	healOK     = iota
	healSame   // another replica is healing the same token
	healCapped // a cap refuses it
	healFailed // Redis did not answer
)

// mayHeal takes one heal of the credential whose answer of h's token is
// kept from its caps, in one script on one key (h.key + ":heal", a hash),
// so that no report sees a half-taken heal: the gap since the last heal,
// which holds the hash of the token healed so that replicas reporting the
// same token are told apart from a second invalidation, and the heals of
// the day (a count that starts again a day after its first). A heal the
// day's count refuses leaves the gap alone: it used to be taken first, so
// the next report of the same token read as the same heal and went ahead
// past the count.
func (s *Sharer) mayHeal(ctx context.Context, h handed) int {
	if s.healGap <= 0 && s.healsPerDay <= 0 {
		return healOK
	}
	n, err := s.rdb.Eval(ctx, mayHealLua, []string{h.key + ":heal"}, h.tag,
		s.healGap.Milliseconds(), (24 * time.Hour).Milliseconds(), s.healsPerDay).Int()
	if err != nil {
		return healFailed
	}
	return n
}

// mayHealLua answers healOK (0, and takes the heal), healSame (1) or
// healCapped (2). KEYS[1]: the caps' hash (fields tag and gapEnd: the
// token last healed and when its gap ends; n and dayEnd: the day's
// count). ARGV: the token's hash, the gap (ms, 0 none), a day (ms), the
// heals a day (0 none). Times are Redis's, in ms.
const mayHealLua = `local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call('HMGET', KEYS[1], 'tag', 'gapEnd', 'n', 'dayEnd')
local gap, day, perDay = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if gap > 0 and v[1] and (tonumber(v[2]) or 0) > now then
  if v[1] == ARGV[1] then return 1 end
  return 2
end
local n, dayEnd = tonumber(v[3]) or 0, tonumber(v[4]) or 0
if dayEnd <= now then n, dayEnd = 0, now + day end
if perDay > 0 and n >= perDay then return 2 end
redis.call('HSET', KEYS[1], 'tag', ARGV[1], 'gapEnd', now + gap, 'n', n + 1, 'dayEnd', dayEnd)
redis.call('PEXPIREAT', KEYS[1], math.max(dayEnd, now + gap))
return 0`

// healLua deletes a kept answer whose value starts with the token's hash.
const healLua = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 16) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

// invalidToken reports whether an answer says the token it was sent with is
// invalid or expired: WeChat and WeCom 40001, 42001, 40014, and WeCom's
// 42009 for a suite's token; DingTalk 40014 (old API; on /topapi paths
// errcode 88 with sub_code 40014) or HTTP 401 InvalidAuthentication (new
// API); Feishu 99991663
// (invalid) and 99991677 (expired).
func invalidToken(provider string, status int, body []byte) bool {
	// Most answers are successes: only one naming an invalid-token code
	// is decoded, so a normal call costs a scan, not a JSON decode.
	if !mentionsInvalidToken(body) {
		return false
	}
	var a struct {
		ErrCode int             `json:"errcode"`
		Code    json.RawMessage `json:"code"`
		// DingTalk's /topapi paths wrap the old API's code as errcode 88
		// with the code in sub_code, a string or a number.
		SubCode json.RawMessage `json:"sub_code"`
	}
	if json.Unmarshal(body, &a) != nil {
		return false
	}
	switch provider {
	case wechat:
		return a.ErrCode == 40001 || a.ErrCode == 42001 || a.ErrCode == 40014
	case wecom:
		// 40082 and 42009: a suite's token invalid, expired.
		return a.ErrCode == 40001 || a.ErrCode == 42001 || a.ErrCode == 40014 || a.ErrCode == 40082 || a.ErrCode == 42009
	case dingtalk:
		sub := strings.Trim(string(a.SubCode), `"`)
		return a.ErrCode == 40014 || a.ErrCode == 88 && sub == "40014" ||
			(status == http.StatusUnauthorized && string(a.Code) == `"InvalidAuthentication"`)
	case feishu:
		// 99991664: an app_access_token invalid.
		return string(a.Code) == "99991663" || string(a.Code) == "99991664" || string(a.Code) == "99991677"
	}
	return false
}

// invalidTokenCodes are the codes invalidToken looks for, as they appear
// in an answer's text.
var invalidTokenCodes = [][]byte{[]byte("40001"), []byte("42001"), []byte("40014"), []byte("40082"), []byte("42009"),
	[]byte("InvalidAuthentication"), []byte("99991663"), []byte("99991664"), []byte("99991677")}

// mentionsInvalidToken reports whether body holds one of the codes.
func mentionsInvalidToken(body []byte) bool {
	for _, c := range invalidTokenCodes {
		if bytes.Contains(body, c) {
			return true
		}
	}
	return false
}

// handed is what healing needs of a token this replica handed out: where
// its answer is kept and the hash the value starts with (the hash of the
// answer's first token, whichever of its tokens this is).
type handed struct {
	provider string
	key      string
	tag      []byte
	until    time.Time
	appOnly  bool // a Feishu app_access_token: replaced by the app token kept now
	// The exchange, its path and its credential's keys: what opens the
	// kept answer to find the token that replaces a refused one.
	ex   *exchange
	path string
	k    *keys
}

// maxHanded bounds the tokens remembered for healing: a service holds one
// per app and org, a few thousand at most. maxAnswersPerToken bounds the
// kept answers remembered for one token: one token comes from more than
// one exchange (Feishu's tenant_access_token/internal and
// app_access_token/internal, DingTalk's gettoken and oauth2/accessToken),
// each keeping its own answer.
const (
	maxHanded          = 1 << 16
	maxAnswersPerToken = 4
)

// remember keeps tok for healing with the answer that keeps it, forgetting
// the tokens past their end when the map is full.
func (s *Sharer) remember(tok string, h handed) {
	s.mu.Lock()
	defer func() {
		s.nHand.Store(int32(len(s.handed) + len(s.dead)))
		s.mu.Unlock()
	}()
	// Handed out again (its heal capped, the kept answer still holds it),
	// a refused token is watched as any other, not replaced: what is kept
	// is the token itself.
	delete(s.dead, tok)
	hs, known := s.handed[tok]
	if !known && len(s.handed) >= maxHanded {
		now := s.now()
		for t, es := range s.handed {
			if now.After(lastUntil(es)) {
				delete(s.handed, t)
			}
		}
		if len(s.handed) >= maxHanded {
			return
		}
	}
	for i := range hs {
		if hs[i].key == h.key {
			hs[i] = h
			return
		}
	}
	if len(hs) < maxAnswersPerToken {
		s.handed[tok] = append(hs, h)
	}
}

// rememberAnswer keeps each sane token of one answer for healing with h,
// the answer that keeps them: a refusal of any of them (Feishu's 99991664
// for the app token of an app_access_token answer, 99991663 for its
// tenant token) deletes that answer.
func (s *Sharer) rememberAnswer(toks []exchanges.Token, h handed) {
	for _, t := range toks {
		if tokenform.Sane(t.Value) {
			h.appOnly = t.AppOnly
			s.remember(t.Value, h)
		}
	}
}

// lastUntil is when the last of a token's answers ends.
func lastUntil(hs []handed) time.Time {
	var t time.Time
	for _, h := range hs {
		if h.until.After(t) {
			t = h.until
		}
	}
	return t
}
