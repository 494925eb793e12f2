package tokens

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
)

// maxErrorBody bounds what is read of an answer to a handed-out token: the
// providers' error bodies are a few dozen bytes, their code first.
const maxErrorBody = 4 << 10

// watch sends a request and, when it carries a token this replica handed
// out and the provider answers that the token is invalid or expired,
// deletes the kept answer it came from.
func (s *Sharer) watch(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	tok := apps.Token(req)
	if tok == "" {
		return base.RoundTrip(req)
	}
	s.mu.Lock()
	h, ok := s.handed[tok]
	s.mu.Unlock()
	if !ok {
		return base.RoundTrip(req)
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	raw, _ := providers.PeekBody(resp, maxErrorBody)
	if invalidToken(h.provider, resp.StatusCode, raw) {
		s.heal(req.Context(), tok, h)
	}
	return resp, nil
}

// heal deletes the kept answer of tok, compared on the token's hash: a
// newer answer another replica stored in the meantime stays.
func (s *Sharer) heal(ctx context.Context, tok string, h handed) {
	s.mu.Lock()
	delete(s.handed, tok)
	s.nHand.Store(int32(len(s.handed)))
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.lease)
	defer cancel()
	if n, err := s.rdb.Eval(ctx, healLua, []string{h.key}, h.tag).Int(); err == nil && n == 1 {
		s.count(h.provider, Healed)
	}
}

// healLua deletes a kept answer whose value starts with the token's hash.
const healLua = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 16) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

// invalidToken reports whether an answer says the token it was sent with is
// invalid or expired: WeChat and WeCom 40001, 42001, 40014; DingTalk 40014
// (old API) or HTTP 401 InvalidAuthentication (new API); Feishu 99991663
// (invalid) and 99991677 (expired).
func invalidToken(provider string, status int, body []byte) bool {
	var a struct {
		ErrCode int             `json:"errcode"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(body, &a) != nil {
		return false
	}
	switch provider {
	case wechat, wecom:
		return a.ErrCode == 40001 || a.ErrCode == 42001 || a.ErrCode == 40014
	case dingtalk:
		return a.ErrCode == 40014 || (status == http.StatusUnauthorized && string(a.Code) == `"InvalidAuthentication"`)
	case feishu:
		return string(a.Code) == "99991663" || string(a.Code) == "99991677"
	}
	return false
}
