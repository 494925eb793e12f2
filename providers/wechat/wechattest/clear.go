package wechattest

import (
	"net/http"
	"time"
)

// ClearQuotaPath is WeChat's clear_quota: POST {"appid": ...} with a token
// of that account resets every API's daily count of the account (per-minute
// limits are not daily quotas and stay). ClearQuotaMonthly successful clears
// are allowed per calendar month in Asia/Shanghai; the next ones answer
// CodeClearQuotaLimit and clear nothing. The call is counted against no
// daily or per-minute limit, whatever Limits says of its path.
const ClearQuotaPath = "/cgi-bin/clear_quota"

// QuotaClearPath is WeChat's clear of one API: POST {"cgi_path": ...}
// resets that API's daily count of the token's account. It has a monthly
// allowance of its own, QuotaClearMonthly, separate from clear_quota's,
// and is otherwise unlimited like ClearQuotaPath. A path without a daily
// quota answers CodeQuotaBadPath, as a quota query does.
const QuotaClearPath = "/cgi-bin/openapi/quota/clear"

// The monthly allowances WeChat documents for an account.
const (
	ClearQuotaMonthly = 10
	QuotaClearMonthly = 50
)

// CodeClearQuotaLimit answers a clear beyond the month's allowance.
const CodeClearQuotaLimit = 48006

// MsgClearQuotaLimit is WeChat's message for CodeClearQuotaLimit.
const MsgClearQuotaLimit = "forbid to clear quota because of reaching the limit"

type clearQuotaRequest struct {
	AppID string `json:"appid"`
}

// clearQuotaLocked answers a clear_quota call of app's token naming target.
// WeChat wants the account named even though the token already names it,
// and refuses any other account.
func (s *Server) clearQuotaLocked(rec *Request, app, target string, emu time.Time) (int, string) {
	if target == "" || target != app {
		rec.Code = CodeInvalidAppID
		return http.StatusOK, errBody(CodeInvalidAppID, "invalid appid")
	}
	if !s.spendClearLocked(app, ClearQuotaPath, ClearQuotaMonthly, emu) {
		rec.Code = CodeClearQuotaLimit
		return http.StatusOK, errBody(CodeClearQuotaLimit, MsgClearQuotaLimit)
	}
	s.clearDailyLocked(app, "")
	return http.StatusOK, `{"errcode":0,"errmsg":"ok"}`
}

// quotaClearLocked answers a quota/clear call of app for path.
func (s *Server) quotaClearLocked(rec *Request, app, path string, emu time.Time) (int, string) {
	if path == "" || s.limitsOf(app).Daily[path] <= 0 {
		rec.Code = CodeQuotaBadPath
		return http.StatusOK, errBody(CodeQuotaBadPath, "invalid cgi_path")
	}
	if !s.spendClearLocked(app, QuotaClearPath, QuotaClearMonthly, emu) {
		rec.Code = CodeClearQuotaLimit
		return http.StatusOK, errBody(CodeClearQuotaLimit, MsgClearQuotaLimit)
	}
	s.clearDailyLocked(app, path)
	return http.StatusOK, `{"errcode":0,"errmsg":"ok"}`
}

// spendClearLocked takes one of app's clears of this month (Asia/Shanghai,
// emulated time) from the allowance of the endpoint at via, or reports it
// spent. Only a clear that is about to happen is taken, as WeChat counts
// the clears that took effect.
func (s *Server) spendClearLocked(app, via string, allowance int, emu time.Time) bool {
	k := windowKey{app: app, path: via, kind: 'c'}
	w := s.windows[k]
	if w == nil {
		w = &window{}
		s.windows[k] = w
	}
	if month := beijingMonth(emu); !w.start.Equal(month) {
		w.start, w.n = month, 0
	}
	if w.n >= allowance {
		return false
	}
	w.n++
	return true
}

// clearDailyLocked resets app's daily count of path, or of every API when
// path is empty: the one reset behind both clear APIs and ClearQuota.
func (s *Server) clearDailyLocked(app, path string) {
	for k := range s.windows {
		if k.app == app && k.kind == 'd' && (path == "" || k.path == path) {
			delete(s.windows, k)
		}
	}
}

// beijingMonth is the start of t's calendar month in Asia/Shanghai.
func beijingMonth(t time.Time) time.Time {
	y, m, _ := t.In(Beijing).Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, Beijing)
}
