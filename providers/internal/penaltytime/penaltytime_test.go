package penaltytime

import (
	"net/http"
	"testing"
	"time"
)

func bj(s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999", s, Beijing())
	if err != nil {
		panic(err)
	}
	return t
}

func TestBeijingOffset(t *testing.T) {
	_, off := time.Date(2025, 7, 1, 0, 0, 0, 0, Beijing()).Zone()
	if off != 8*3600 {
		t.Fatalf("Beijing offset %d, want UTC+8", off)
	}
}

func TestParseBeijingEnd(t *testing.T) {
	tests := []struct {
		msg  string
		want string // "" for not found
	}{
		{"您的服务器调用钉钉开放平台当前接口的所有请求都被暂时禁用了, 处罚将在 2019-02-13 20:40:05 结束.", "2019-02-13 20:40:05"},
		{"请求总次数超过了 300 次, 处罚将在 2019-02-13 20:40:05 结束.", "2019-02-13 20:40:05"},
		{"...限制将在2024-12-31 23:59:59结束", "2024-12-31 23:59:59"},
		{"限制将在\u30002025-01-01 00:00:01 结束", "2025-01-01 00:00:01"},
		{"the penalty will end at 2025-03-04 05:06:07.", "2025-03-04 05:06:07"},
		{"blocked until 2025-03-04 05:06:07", "2025-03-04 05:06:07"},
		{"处罚将在 soon 结束; 限制将在 2025-03-04 05:06:07 结束", "2025-03-04 05:06:07"},
		{"处罚将在 2019-02-13 20:40 结束", ""},
		{"处罚将在 2019-13-13 20:40:05 结束", ""},
		{"2019-02-13 20:40:05 with no marker", ""},
		{"", ""},
		{"处罚将在", ""},
		// More than 31 days after now (2025-03-04 05:00 Beijing): garbled
		// or hostile, never a provider's penalty.
		{"处罚将在 9999-12-31 23:59:59 结束", ""},
		{"处罚将在 2025-04-04 05:00:01 结束", ""},
		{"处罚将在 2025-04-04 04:59:59 结束", "2025-04-04 04:59:59"},
	}
	now := bj("2025-03-04 05:00:00")
	for _, tt := range tests {
		got, ok := ParseBeijingEnd(tt.msg, now)
		if tt.want == "" {
			if ok {
				t.Errorf("ParseBeijingEnd(%q) = %v, want none", tt.msg, got)
			}
			continue
		}
		if !ok || !got.Equal(bj(tt.want)) {
			t.Errorf("ParseBeijingEnd(%q) = %v, %v, want %s Beijing", tt.msg, got, ok, tt.want)
		}
	}
	// The instant is right whatever the caller's zone: 20:40:05 Beijing is
	// 12:40:05 UTC.
	got, _ := ParseBeijingEnd("处罚将在 2019-02-13 20:40:05 结束", now)
	if want := time.Date(2019, 2, 13, 12, 40, 5, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("got %v, want %v", got.UTC(), want)
	}
}

func TestNextBoundaries(t *testing.T) {
	tests := []struct {
		name string
		fn   func(time.Time) time.Time
		now  string
		want string
	}{
		{"second", NextSecond, "2025-01-01 10:00:00.5", "2025-01-01 10:00:01"},
		{"second on the edge", NextSecond, "2025-01-01 10:00:00", "2025-01-01 10:00:01"},
		{"minute", NextMinute, "2025-01-01 10:00:59.9", "2025-01-01 10:01:00"},
		{"minute over the hour", NextMinute, "2025-01-01 23:59:30", "2025-01-02 00:00:00"},
		{"midnight", NextMidnight, "2025-01-01 10:00:00", "2025-01-02 00:00:00"},
		{"midnight at year end", NextMidnight, "2025-12-31 23:59:59", "2026-01-01 00:00:00"},
		{"midnight exactly", NextMidnight, "2025-03-01 00:00:00", "2025-03-02 00:00:00"},
		{"month", NextMonth, "2025-01-31 12:00:00", "2025-02-01 00:00:00"},
		{"month at year end", NextMonth, "2025-12-15 00:00:00", "2026-01-01 00:00:00"},
		{"month on the 1st", NextMonth, "2025-02-01 00:00:00", "2025-03-01 00:00:00"},
	}
	for _, tt := range tests {
		now := bj(tt.now)
		if got := tt.fn(now); !got.Equal(bj(tt.want)) {
			t.Errorf("%s(%s) = %v, want %s", tt.name, tt.now, got, tt.want)
		}
		// Same instant given in UTC: same answer.
		if got := tt.fn(now.UTC()); !got.Equal(bj(tt.want)) {
			t.Errorf("%s(%s UTC) = %v, want %s", tt.name, tt.now, got, tt.want)
		}
	}
	// 16:30 UTC is 00:30 the next day in Beijing: the next midnight is the
	// one after that.
	now := time.Date(2025, 1, 1, 16, 30, 0, 0, time.UTC)
	if got, want := NextMidnight(now), bj("2025-01-03 00:00:00"); !got.Equal(want) {
		t.Fatalf("NextMidnight(%v) = %v, want %v", now, got, want)
	}
}

func TestParseResetHeader(t *testing.T) {
	now := bj("2025-01-01 10:00:00")
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"5", 5 * time.Second, true},
		{" 12 ", 12 * time.Second, true},
		{"0", 0, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"-3", 0, false},
		{"abc", 0, false},
		{"NaN", 0, false},
		{"99999999999", 0, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.v != "" {
			h.Set("x-ogw-ratelimit-reset", tt.v)
		}
		got, ok := ParseResetHeader(h, now)
		if ok != tt.ok || ok && !got.Equal(now.Add(tt.want)) {
			t.Errorf("ParseResetHeader(%q) = %v, %v, want now+%v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

// A quota error read just after a midnight (or a month's start) in
// Beijing, within the grace and the answer's way back, is the old
// period's: its penalty ends a second from now, not at the next boundary
// (it stopped the API for 24 h, or the whole new month).
func TestQuotaEndsBelongToThePeriodCounted(t *testing.T) {
	const grace = 5 * time.Second
	bj := time.FixedZone("CST", 8*3600)
	day := func(h, m, s int) time.Time { return time.Date(2026, 3, 1, h, m, s, 0, bj) }
	for _, c := range []struct {
		now      time.Time
		day, mon time.Time
	}{
		{day(12, 0, 0), time.Date(2026, 3, 2, 0, 0, 5, 0, bj), time.Date(2026, 4, 1, 0, 0, 5, 0, bj)},
		{time.Date(2026, 2, 28, 23, 59, 59, 0, bj), day(0, 0, 5), day(0, 0, 5)},
		{day(0, 0, 3), day(0, 0, 5), day(0, 0, 5)},
		{day(0, 0, 9), day(0, 0, 10), day(0, 0, 10)}, // the old period's, ended: a second from now
		{day(0, 0, 11), time.Date(2026, 3, 2, 0, 0, 5, 0, bj), time.Date(2026, 4, 1, 0, 0, 5, 0, bj)},
	} {
		if got := DayEnd(c.now, grace); !got.Equal(c.day) {
			t.Errorf("DayEnd(%v) = %v, want %v", c.now, got.In(bj), c.day)
		}
		if got := MonthEnd(c.now, grace); !got.Equal(c.mon) {
			t.Errorf("MonthEnd(%v) = %v, want %v", c.now, got.In(bj), c.mon)
		}
	}
}
