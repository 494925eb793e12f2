package feishu

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// learnedTTL is how long a level learned from a 99991400 holds before the
// table's applies again. A lowered API is not refused again, so nothing
// renews it: a day bounds how long a level Feishu raised since stays low.
const learnedTTL = 24 * time.Hour

// Windows of a learned limit (providers.Learned.Window).
const (
	learnedSecond = "s"
	learnedMinute = "m"
)

// learnedLimits holds the levels learned from Feishu's answers, by API: a
// 99991400 states the limit of the window that tripped in
// x-ogw-ratelimit-limit, and when the preset's table is higher the API's
// rule is lowered to it. Shared by the profiles rebuilt for a new latency
// allowance.
type learnedLimits struct {
	n atomic.Int32 // entries, so that routes skip the map while there are none
	m sync.Map     // API name -> *learnedEntry
}

type learnedEntry struct {
	level Level
	until time.Time
	route providers.Route // without a recipient, as routes caches them
}

// levelOf is the level the table (or App.APIs) gives an API.
func (p *preset) levelOf(api string) Level {
	if n, ok := p.cfg.APIs[api]; ok {
		return p.cfg.Levels[n]
	}
	if p.cfg.NoDefaultLevel {
		return Level{}
	}
	return p.cfg.Levels[p.cfg.DefaultLevel]
}

// current is the level in force for an API: learned, else the table's.
func (p *preset) current(api string, now time.Time) Level {
	if p.learned.n.Load() > 0 {
		if e, ok := p.learned.m.Load(api); ok && now.Before(e.(*learnedEntry).until) {
			return e.(*learnedEntry).level
		}
	}
	return p.levelOf(api)
}

// learnedFrom reads a 99991400's x-ogw-ratelimit-limit: a limit below the
// level in force for the API is learned. The window is the one the reset
// says: more than a second to wait is the minute's cap.
func (p *preset) learnedFrom(h http.Header, api string, now time.Time) *providers.Learned {
	limit, err := strconv.Atoi(strings.TrimSpace(h.Get("X-Ogw-Ratelimit-Limit")))
	if err != nil || limit <= 0 {
		return nil
	}
	// Read as the penalty's end is (a fraction of a second included):
	// read as an integer, "12.5" was 0, the second's cap.
	reset, _ := penaltytime.ParseSeconds(strings.TrimSpace(h.Get("X-Ogw-Ratelimit-Reset")))
	lvl := p.current(api, now)
	l := &providers.Learned{API: api, Window: learnedSecond, Limit: limit, Until: now.Add(learnedTTL)}
	have := lvl.PerSecond
	if reset > time.Second {
		l.Window, have = learnedMinute, lvl.PerMinute
	}
	if have != 0 && limit >= have {
		return nil // the table is right (or lower): never raise
	}
	return l
}

// lower applies a learned limit, from this replica's answer or another's.
// It only ever lowers: a limit at or above the level in force is ignored.
func (p *preset) lower(l providers.Learned) bool {
	now := p.cfg.Clock()
	if !now.Before(l.Until) || l.Limit <= 0 || !p.knows(l.API) {
		return false
	}
	// A compare-and-swap loop: limits of one API learned at once (this
	// replica's answer, another's stored one, the app set applying what it
	// kept) each build on what the other stored. With a plain store, one
	// window's limit was lost, or a higher limit stored last raised the
	// level, now and then (tens in 3,000 races).
	for {
		old, had := p.learned.m.Load(l.API)
		lvl := p.levelOf(l.API)
		if had && now.Before(old.(*learnedEntry).until) {
			lvl = old.(*learnedEntry).level
		}
		switch {
		case l.Window == learnedSecond && (lvl.PerSecond == 0 || l.Limit < lvl.PerSecond):
			lvl.PerSecond = l.Limit
		case l.Window == learnedMinute && (lvl.PerMinute == 0 || l.Limit < lvl.PerMinute):
			lvl.PerMinute = l.Limit
		default:
			return false
		}
		rules, _, err := p.levelRules(lvl, l.API)
		if err != nil {
			return false
		}
		rules = append(rules[:len(rules):len(rules)], p.month...)
		e := &learnedEntry{level: lvl, until: l.Until, route: providers.Route{API: l.API,
			Rules: rules[:len(rules):len(rules)], Scopes: p.scopes(l.API)}}
		if had {
			if p.learned.m.CompareAndSwap(l.API, old, e) {
				return true
			}
			continue
		}
		if _, loaded := p.learned.m.LoadOrStore(l.API, e); !loaded {
			p.learned.n.Add(1)
			return true
		}
	}
}

// learnedRoute is the route of an API whose level was learned, while it
// holds.
func (p *preset) learnedRoute(api string) (providers.Route, bool) {
	if p.learned.n.Load() == 0 {
		return providers.Route{}, false
	}
	v, ok := p.learned.m.Load(api)
	if !ok {
		return providers.Route{}, false
	}
	e := v.(*learnedEntry)
	if !p.cfg.Clock().Before(e.until) {
		if p.learned.m.CompareAndDelete(api, v) {
			p.learned.n.Add(-1)
		}
		return providers.Route{}, false
	}
	return e.route, true
}

// knows reports whether api is an API the preset routes to: a template of
// the catalog or of App.APIs, or a method's stand-in for the paths they
// lack. A learned limit of another name lowers nothing a request could
// use, and keeping a route for it would let a learned hash that anyone
// with write access to the Redis can fill grow every profile's memory.
func (p *preset) knows(api string) bool {
	method, path, ok := strings.Cut(api, " ")
	if !ok {
		return false
	}
	if api == uncatalogued(method) {
		return true
	}
	name, known := catalog.Find(method, path, p.extra, p.apis)
	return known && name == api
}
