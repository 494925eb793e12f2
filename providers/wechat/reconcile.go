package wechat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// Reconciliation with WeChat's own count (Config.Reconcile): the Transport
// reads /cgi-bin/openapi/quota/get for each account's daily-quota APIs it
// sees called, and hands the reading back to every replica's profile as a
// providers.Learned with App set, Window learnedDaily.

// quotaGetPath is WeChat's quota query: POST {"cgi_path": ...} with the
// account's access token answers the API's daily_limit, used and remain.
const quotaGetPath = "/cgi-bin/openapi/quota/get"

// learnedDaily is the Window of a reconciled daily limit: the daily rule's
// unit (rule.Day.String()), as the Transport names it.
const learnedDaily = "day"

// quotaAnswerLimit bounds how much of quota/get's answer is read (about 150
// bytes).
const quotaAnswerLimit = 4 << 10

// errQuotaAnswer reports a quota/get answer that gives no reading: an
// errcode (a token no longer valid, 76021 for a path without a daily
// quota), or a body that is not the documented shape.
var errQuotaAnswer = errors.New("wechat: quota/get gave no reading")

// quotaCheck is the preset's providers.QuotaCheck, or nil when Reconcile is
// off.
func (c *Config) quotaCheck() *providers.QuotaCheck {
	if !c.Reconcile {
		return nil
	}
	return &providers.QuotaCheck{
		Every: cmp.Or(c.ReconcileEvery, defaultReconcileEvery),
		Target: func(req *http.Request, r *providers.Route) (providers.QuotaTarget, bool) {
			return quotaTarget(req, r, len(c.Apps) == 1)
		},
		Query: quotaQuery,
		Read:  readQuota,
	}
}

// quotaTarget names the daily quota a routed request counts against, with
// the token it carries. The account is the one in the rule's key
// ("day:<AppID>:<path>"); the request must be tagged with that account
// (learned from its token, or given by the caller), or the preset must
// list only that one: an untagged request charged to an account
// (Config.Default) may carry another account's token, which would read
// that account's quota onto this one. The shared unknown scope names none.
func quotaTarget(req *http.Request, r *providers.Route, single bool) (providers.QuotaTarget, bool) {
	for i := range r.Rules {
		rl := r.Rules[i]
		if rl.Unit() != rule.Day || !strings.HasPrefix(rl.Key(), "day:") {
			continue
		}
		app, path, ok := strings.Cut(rl.Key()[len("day:"):], ":")
		if !ok || app == unknownApp || path != r.API || path == quotaGetPath {
			return providers.QuotaTarget{}, false
		}
		if a, tagged := apps.FromContext(req.Context()); (tagged && a.ID != app) || (!tagged && !single) {
			return providers.QuotaTarget{}, false
		}
		tok := req.URL.Query().Get("access_token")
		if tok == "" || req.URL.Host == "" {
			return providers.QuotaTarget{}, false
		}
		scheme := req.URL.Scheme
		if scheme == "" {
			scheme = "https"
		}
		t := providers.QuotaTarget{App: app, API: path, Rule: rl, Origin: scheme + "://" + req.URL.Host, Token: tok}
		if req.Host != "" && req.Host != req.URL.Host {
			t.Host = req.Host
		}
		return t, true
	}
	return providers.QuotaTarget{}, false
}

// quotaQuery builds the quota/get call for t.
func quotaQuery(ctx context.Context, t providers.QuotaTarget) (*http.Request, error) {
	body, err := json.Marshal(map[string]string{"cgi_path": t.API})
	if err != nil {
		return nil, err
	}
	u := t.Origin + quotaGetPath + "?" + url.Values{"access_token": {t.Token}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(string(body)))
	if err != nil {
		// The URL holds the token: say what failed without it.
		return nil, fmt.Errorf("wechat: quota/get request for %s: bad origin %q", t.API, t.Origin)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Host = t.Host // through the gateway the account's requests took, if any
	return req, nil
}

// readQuota reads quota/get's answer.
func readQuota(resp *http.Response) (providers.QuotaReading, error) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, quotaAnswerLimit))
	if err != nil {
		return providers.QuotaReading{}, fmt.Errorf("%w: %w", errQuotaAnswer, err)
	}
	var a struct {
		Errcode *int   `json:"errcode"`
		Errmsg  string `json:"errmsg"`
		Quota   *struct {
			DailyLimit *int `json:"daily_limit"`
			Used       *int `json:"used"`
		} `json:"quota"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &a) != nil {
		return providers.QuotaReading{}, fmt.Errorf("%w: HTTP %d, not the documented JSON", errQuotaAnswer, resp.StatusCode)
	}
	if a.Errcode != nil && *a.Errcode != 0 {
		return providers.QuotaReading{}, fmt.Errorf("%w: errcode %d %q", errQuotaAnswer, *a.Errcode, clipMsg(a.Errmsg))
	}
	if a.Quota == nil || a.Quota.DailyLimit == nil || a.Quota.Used == nil || *a.Quota.DailyLimit < 1 || *a.Quota.Used < 0 {
		return providers.QuotaReading{}, fmt.Errorf("%w: quota.daily_limit or quota.used missing or out of range", errQuotaAnswer)
	}
	return providers.QuotaReading{Limit: *a.Quota.DailyLimit, Used: *a.Quota.Used}, nil
}

func clipMsg(s string) string {
	if len(s) > maxMessage {
		return strings.ToValidUTF8(s[:maxMessage], "")
	}
	return s
}

// lower applies a reconciled daily limit of this account (a Learned with
// App = the AppID and Window learnedDaily), raising or lowering the API's
// daily rule until it lapses; Feishu-style learned limits (no App) and
// other accounts' are ignored, and so is every limit when Reconcile is
// off: only a replica reading the quota endpoint writes one, so one found
// in Redis then is stale or planted, and a raise would lift the Daily the
// config sets. A reading that lapses before the one in force was taken
// before it (each lapses a fixed time after it was read), so it changes
// nothing: readings applied out of order (an Add applying what the app
// set kept while a newer one arrives) end on the newest. It reports
// whether the rule changed.
func (p *preset) lower(l providers.Learned) bool {
	if !p.cfg.Reconcile || l.App != p.cfg.AppID || l.Window != learnedDaily || l.Limit < 1 || !p.cfg.Clock().Before(l.Until) {
		return false
	}
	for {
		old := p.state.Load()
		cur := old.byAPI[l.API]
		i := dailyIndex(cur)
		if i < 0 || l.Until.Before(old.until[l.API]) || cur[i].Limit() == l.Limit && old.until[l.API].Equal(l.Until) {
			return false
		}
		changed := cur[i].Limit() != l.Limit
		r, err := rule.NewCalendar(cur[i].Key(), l.Limit, rule.Day, penaltytime.Beijing(), rule.WithGrace(p.cfg.DayGrace))
		if err != nil {
			return false
		}
		next := &rules{byAPI: maps.Clone(old.byAPI), until: maps.Clone(old.until)}
		if next.until == nil {
			next.until = map[string]time.Time{}
		}
		nr := append([]rule.Rule(nil), cur...)
		nr[i] = r
		next.byAPI[l.API] = nr[:len(nr):len(nr)]
		next.until[l.API] = l.Until
		if p.state.CompareAndSwap(old, next) {
			return changed
		}
	}
}

// lapse drops the reconciled limit of api once it lapsed, and returns the
// state in force.
func (p *preset) lapse(st *rules, api string) *rules {
	u, ok := st.until[api]
	if !ok || p.cfg.Clock().Before(u) {
		return st
	}
	next := &rules{byAPI: maps.Clone(st.byAPI), until: maps.Clone(st.until)}
	next.byAPI[api] = p.base[api]
	delete(next.until, api)
	if p.state.CompareAndSwap(st, next) {
		return next
	}
	return p.state.Load()
}

// dailyIndex is the index of the daily calendar rule among an API's rules,
// or -1.
func dailyIndex(rs []rule.Rule) int {
	for i := range rs {
		if rs[i].Unit() == rule.Day {
			return i
		}
	}
	return -1
}
