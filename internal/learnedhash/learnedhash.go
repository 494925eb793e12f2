package learnedhash

import (
	"strconv"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers"
)

// Bounds of a field a replica takes, since anyone who can write to the
// Redis can fill the hash: a field longer than MaxField is garbled (an API
// is a catalog template), and so is a window over 8 bytes or an app over
// 64; a limit lapsing more than MaxAhead from now is garbled too, dropped
// rather than kept for good.
const (
	MaxField = 512
	MaxAhead = 31 * 24 * time.Hour
)

// Key is the hash of a group's learned limits.
func Key(prefix, group string) string { return "{" + prefix + ":" + group + "}:learned" }

// Field and Value are a learned limit's field and value in the hash.
func Field(l providers.Learned) string {
	if l.App != "" {
		return l.Window + "@" + l.App + " " + l.API
	}
	return l.Window + " " + l.API
}

func Value(l providers.Learned) string {
	return strconv.Itoa(l.Limit) + ":" + strconv.FormatInt(l.Until.UnixMilli(), 10)
}

// Parse reads one field of the hash; a garbled one is refused (ok false)
// rather than trusted. It says nothing of lapse: see InForce.
func Parse(field, v string) (l providers.Learned, ok bool) {
	window, api, ok := strings.Cut(field, " ")
	window, app, withApp := strings.Cut(window, "@")
	limit, until, ok2 := strings.Cut(v, ":")
	if !ok || !ok2 || len(field) > MaxField || window == "" || len(window) > 8 || api == "" || withApp && (app == "" || len(app) > 64) {
		return providers.Learned{}, false
	}
	n, err := strconv.Atoi(limit)
	ms, err2 := strconv.ParseInt(until, 10, 64)
	if err != nil || err2 != nil || n <= 0 {
		return providers.Learned{}, false
	}
	return providers.Learned{API: api, App: app, Window: window, Limit: n, Until: time.UnixMilli(ms)}, true
}

// InForce reports whether a parsed limit applies at now: not lapsed, and
// not lapsing further ahead than any replica writes one.
func InForce(l providers.Learned, now time.Time) bool {
	return now.Before(l.Until) && !l.Until.After(now.Add(MaxAhead))
}
