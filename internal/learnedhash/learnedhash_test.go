package learnedhash

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers"
)

// FuzzParse: a stored learned limit is read from Redis, where anything may
// be written; it is either refused or a limit that can only lower a rule,
// and one accepted is written back as it was read.
func FuzzParse(f *testing.F) {
	f.Add("s GET /open-apis/contact/v3/users/:user_id", "10:1795670375557")
	f.Add("day@wx1 /cgi-bin/message/custom/send", "5000:1795670375557")
	f.Add("m POST /x", "100:0")
	f.Add("", ":")
	f.Add("toolongwindow GET /x", "10:1")
	f.Fuzz(func(t *testing.T, field, v string) {
		l, ok := Parse(field, v)
		if !ok {
			return
		}
		if l.Limit <= 0 || l.Window == "" || len(l.Window) > 8 || l.API == "" || len(l.App) > 64 || len(field) > MaxField {
			t.Fatalf("Parse(%q, %q) = %+v, accepted", field, v, l)
		}
		if again, ok := Parse(Field(l), Value(l)); !ok || again != l {
			t.Fatalf("Parse(%q, %q) = %+v; written back and read again: %+v, %v", field, v, l, again, ok)
		}
	})
}

// A limit is in force from now until Until, and not when it lapses further
// ahead than any replica writes one (planted).
func TestInForce(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		until time.Time
		want  bool
	}{
		{now.Add(time.Hour), true},
		{now.Add(MaxAhead), true},
		{now, false},
		{now.Add(MaxAhead + time.Millisecond), false},
	} {
		if got := InForce(providers.Learned{Until: c.until}, now); got != c.want {
			t.Errorf("InForce(until now+%v) = %v, want %v", c.until.Sub(now), got, c.want)
		}
	}
}

// Write keeps a field as the profiles apply limits: a limit of every app
// only lowers one in force; an app's reading gives way only to one read no
// earlier (a later Until), higher or not; a lapsed field is replaced. The
// hash lives as long as its longest-lived field. A replica started later
// reads what the fleet runs at: with a plain write, the last writer won.
func TestWrite(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := Key("learnedhash-test", "g")
	now := time.Now()
	stored := func(l providers.Learned) string {
		t.Helper()
		v, err := rdb.HGet(ctx, key, Field(l)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	write := func(l providers.Learned, want bool) {
		t.Helper()
		if got, err := Write(ctx, rdb, key, l, now); err != nil || got != want {
			t.Fatalf("Write(%+v) = %v, %v; want %v", l, got, err, want)
		}
	}
	api := providers.Learned{API: "GET /x", Window: "s", Limit: 20, Until: now.Add(time.Hour)}
	write(api, true)
	higher := api
	higher.Limit, higher.Until = 30, now.Add(2*time.Hour)
	write(higher, false)
	if got := stored(api); got != Value(api) {
		t.Fatalf("after a higher limit: %s, want the 20 in force", got)
	}
	lower := api
	lower.Limit = 10
	write(lower, true)

	reading := providers.Learned{API: "/cgi-bin/x", App: "wx1", Window: "day", Limit: 5000, Until: now.Add(24 * time.Hour)}
	write(reading, true)
	older := reading
	older.Limit, older.Until = 3000, now.Add(23*time.Hour)
	write(older, false)
	newer := reading
	newer.Limit, newer.Until = 8000, now.Add(25*time.Hour)
	write(newer, true)
	if got := stored(reading); got != Value(newer) {
		t.Fatalf("after a newer reading: %s, want %s", got, Value(newer))
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl < 24*time.Hour {
		t.Fatalf("hash lives %v, want as long as its longest field (25 h)", ttl)
	}
	// A field that lapsed is replaced whatever it held.
	lapsed := providers.Learned{API: "GET /y", Window: "s", Limit: 1, Until: now.Add(-time.Minute)}
	rdb.HSet(ctx, key, Field(lapsed), Value(lapsed))
	again := lapsed
	again.Limit, again.Until = 50, now.Add(time.Hour)
	write(again, true)
	write(providers.Learned{API: "GET /z", Window: "s", Limit: 1, Until: now.Add(-time.Second)}, false)

	// A value no replica takes (a limit of 0, an end past MaxAhead),
	// planted, blocks nothing: it blocked every write until a replica's
	// read dropped it.
	for _, planted := range []string{"1:" + fmt.Sprint(now.Add(MaxAhead+time.Hour).UnixMilli()), "0:" + fmt.Sprint(now.Add(time.Hour).UnixMilli())} {
		l := providers.Learned{API: "GET /planted", Window: "s", Limit: 10, Until: now.Add(time.Hour)}
		rdb.HSet(ctx, key, Field(l), planted)
		write(l, true)
		r := providers.Learned{API: "/cgi-bin/planted", App: "wx1", Window: "day", Limit: 10, Until: now.Add(time.Hour)}
		rdb.HSet(ctx, key, Field(r), planted)
		write(r, true)
	}
}

// Read takes a hash whole while it holds at most max fields, and about max
// of a flooded one, never the whole flood.
func TestReadIsBounded(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	key := Key("readbound", t.Name())
	rdb.Del(ctx, key)
	for i := range 50 {
		rdb.HSet(ctx, key, fmt.Sprintf("s GET /api%d", i), "10:1")
	}
	fields, complete, err := Read(ctx, rdb, key, 100)
	if err != nil || !complete || len(fields) != 50 || fields["s GET /api7"] != "10:1" {
		t.Fatalf("Read of 50 fields, at most 100: %d fields, complete %v, %v; want all 50", len(fields), complete, err)
	}
	pipe := rdb.Pipeline()
	for i := range 20_000 {
		pipe.HSet(ctx, key, fmt.Sprintf("s GET /flood%d", i), "10:1")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	fields, complete, err = Read(ctx, rdb, key, 100)
	if err != nil || complete || len(fields) == 0 || len(fields) > 100 {
		t.Fatalf("Read of 20,050 fields, at most 100: %d fields, complete %v, %v; want at most 100 and not complete", len(fields), complete, err)
	}
	if fields, _, err := Read(ctx, rdb, Key("readbound", "none"), 100); err != nil || len(fields) != 0 {
		t.Fatalf("Read of no hash: %v %v", fields, err)
	}
}
