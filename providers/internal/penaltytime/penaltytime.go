package penaltytime

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// beijing is Asia/Shanghai. It is loaded from the system's zone database
// when there is one; otherwise a fixed UTC+8 zone stands in. China has kept
// UTC+8 without daylight saving since 1991, so both give the same wall clock
// for every time a penalty or quota can concern, and the library does not
// force the 450 KB time/tzdata package into every binary that imports it.
var beijing = loadBeijing()

func loadBeijing() *time.Location {
	if loc, err := time.LoadLocation("Asia/Shanghai"); err == nil {
		return loc
	}
	return time.FixedZone("CST", 8*3600)
}

// Beijing returns the Asia/Shanghai location, in which the Chinese platforms
// state penalty ends and reset their daily and monthly quotas.
func Beijing() *time.Location { return beijing }

// beijingLayout is how DingTalk writes a penalty's end in errmsg.
const beijingLayout = "2006-01-02 15:04:05"

// endMarkers precede a penalty's end time in providers' messages: DingTalk's
// "处罚将在 <time> 结束" and "限制将在 <time> 结束", and English wordings seen
// on international endpoints.
var endMarkers = [...]string{"处罚将在", "限制将在", "将在", "will end at", "will be lifted at", "ends at", "until"}

// ParseBeijingEnd finds a penalty's end written as "YYYY-MM-DD HH:MM:SS"
// after one of the known markers (e.g. "处罚将在 2019-02-13 20:40:05 结束")
// and returns it as a Beijing time. It reports false when the message has no
// such time, or states one more than a month after now (no provider
// penalises that long: the message is garbled or hostile, and an end in the
// year 9999 must not stop an API for good); the caller then falls back to
// the window implied by the code.
func ParseBeijingEnd(msg string, now time.Time) (time.Time, bool) {
	for _, m := range endMarkers {
		rest := msg
		for {
			i := strings.Index(rest, m)
			if i < 0 {
				break
			}
			rest = rest[i+len(m):]
			if t, ok := parseBeijingAt(rest); ok {
				if t.Sub(now) > MaxWait {
					return time.Time{}, false
				}
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// parseBeijingAt parses a Beijing time at the start of s, after spaces
// (ASCII, ideographic or no-break) and an optional colon.
func parseBeijingAt(s string) (time.Time, bool) {
	s = strings.TrimLeft(s, " \t:：\u3000\u00a0")
	if len(s) < len(beijingLayout) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation(beijingLayout, s[:len(beijingLayout)], beijing)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// NextSecond is the start of the wall-clock second after now: the end of a
// per-second penalty, since providers count fixed wall-clock seconds.
func NextSecond(now time.Time) time.Time {
	return now.Truncate(time.Second).Add(time.Second).In(beijing)
}

// NextMinute is the start of the next wall-clock minute (Beijing time).
func NextMinute(now time.Time) time.Time {
	t := now.In(beijing)
	y, mo, d := t.Date()
	return time.Date(y, mo, d, t.Hour(), t.Minute()+1, 0, 0, beijing)
}

// NextMidnight is the next midnight in Beijing, when daily quotas reset.
func NextMidnight(now time.Time) time.Time {
	y, mo, d := now.In(beijing).Date()
	return time.Date(y, mo, d+1, 0, 0, 0, 0, beijing)
}

// NextMonth is 00:00 on the 1st of the next month in Beijing, when monthly
// quotas reset.
func NextMonth(now time.Time) time.Time {
	y, mo, _ := now.In(beijing).Date()
	return time.Date(y, mo+1, 1, 0, 0, 0, 0, beijing)
}

// lateness is how long after a boundary an answer may still be the old
// period's beyond the grace: the time it took to come back.
const lateness = 5 * time.Second

// DayEnd is when the penalty of a daily quota error read at now ends: the
// next midnight in Beijing plus grace, the midnight of the day the
// provider counted the error in. An error read within grace (and the
// answer's way back) after a midnight is the old day's, whose end has just
// passed: it ends a second from now, where counting from now penalised the
// API for the whole new day. The presets' grace is the provider's clock
// running late; a calendar rule starts its window as late.
func DayEnd(now time.Time, grace time.Duration) time.Time {
	return atLeastASecond(now, NextMidnight(now.Add(-grace-lateness)).Add(grace))
}

// MonthEnd is DayEnd for a monthly quota: the 1st of the next month in
// Beijing plus grace, of the month the error was counted in (one read at
// 00:00:03 on the 1st used to stop the API for the whole new month).
func MonthEnd(now time.Time, grace time.Duration) time.Time {
	return atLeastASecond(now, NextMonth(now.Add(-grace-lateness)).Add(grace))
}

func atLeastASecond(now, end time.Time) time.Time {
	if soonest := now.Add(time.Second); end.Before(soonest) {
		return soonest
	}
	return end
}

// MaxWait bounds a wait read from a header or a message: a garbled or
// hostile value must not penalise a scope for years.
const MaxWait = 31 * 24 * time.Hour

// ParseResetHeader reads Feishu's x-ogw-ratelimit-reset header, the number of
// seconds to wait (fractions allowed), and returns when the limit resets.
// It reports false when the header is absent, malformed, negative or longer
// than a month.
func ParseResetHeader(h http.Header, now time.Time) (time.Time, bool) {
	v := strings.TrimSpace(h.Get("X-Ogw-Ratelimit-Reset"))
	if v == "" {
		return time.Time{}, false
	}
	d, ok := ParseSeconds(v)
	if !ok {
		return time.Time{}, false
	}
	return now.Add(d), true
}

// ParseSeconds reads a non-negative decimal number of seconds, at most MaxWait.
func ParseSeconds(v string) (time.Duration, bool) {
	if v == "" || v[0] == '-' || v[0] == '+' {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > int64(MaxWait/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f != f || f < 0 || f > MaxWait.Seconds() {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}
