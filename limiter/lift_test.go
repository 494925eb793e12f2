package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/redis/go-redis/v9"
)

// LiftPenaltyIf removes a penalty only while it is the one seen: a penalty
// replaced, gone, or recorded where none was seen stays and is reported; a
// penalty that is over counts as none, as Inspect shows it.
func TestLiftPenaltyIf(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	l, err := limiter.NewRedis(srv.Client(t), limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t)
	key := "{" + prefix + ":g}:p:ip"
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := l.Penalize(ctx, "g", limiter.Penalty{Scope: "ip", Until: until, Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	st, err := l.Inspect(ctx, "g")
	if err != nil || len(st.Groups[0].Penalties) != 1 {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	seen := st.Groups[0].Penalties[0]

	// Replaced by a longer ban after it was read: refused, kept, reported.
	ban := strconv.FormatInt(until.Add(time.Hour).UnixMicro(), 10) + "|ip-ban|r2"
	c.Set(ctx, key, ban, 2*time.Hour)
	removed, err := l.LiftPenaltyIf(ctx, "g", "ip", &seen)
	var changed *limiter.PenaltyChangedError
	if removed || !errors.As(err, &changed) || !errors.Is(err, limiter.ErrPenaltyChanged) || changed.Now == nil ||
		changed.Now.Code != "ip-ban" || changed.Now.SetBy != "r2" || changed.Now.Value != ban {
		t.Fatalf("lift of a replaced penalty: %v, %v (%+v)", removed, err, changed)
	}
	if c.Get(ctx, key).Val() != ban {
		t.Fatal("the ban was removed")
	}
	// None seen, one there: refused.
	if removed, err := l.LiftPenaltyIf(ctx, "g", "ip", nil); removed || !errors.As(err, &changed) || changed.Now.Code != "ip-ban" {
		t.Fatalf("lift with none seen: %v, %v", removed, err)
	}
	// The one seen: removed.
	st, _ = l.Inspect(ctx, "g")
	if removed, err := l.LiftPenaltyIf(ctx, "g", "ip", &st.Groups[0].Penalties[0]); !removed || err != nil {
		t.Fatalf("lift of the penalty seen: %v, %v", removed, err)
	}
	if c.Exists(ctx, key).Val() != 0 {
		t.Fatal("the penalty seen is still there")
	}
	// Gone since it was seen: refused, with no penalty now.
	if removed, err := l.LiftPenaltyIf(ctx, "g", "ip", &seen); removed || !errors.As(err, &changed) || changed.Now != nil {
		t.Fatalf("lift of a penalty gone: %v, %v", removed, err)
	}
	// Over by its value, key not yet expired: none, as Inspect shows it.
	c.Set(ctx, key, strconv.FormatInt(time.Now().Add(-time.Second).UnixMicro(), 10)+"|old", time.Hour)
	if removed, err := l.LiftPenaltyIf(ctx, "g", "ip", nil); removed || err != nil {
		t.Fatalf("lift of a penalty over, none seen: %v, %v", removed, err)
	}
	if _, err := l.LiftPenaltyIf(ctx, "g", "ip", &inspect.PenaltyState{Scope: "ip"}); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("lift of a seen penalty without its value: %v, want ErrInvalidRequest", err)
	}
}

// A lift whose announcement fails says so (ErrNotAnnounced) and still
// reports the key it removed.
func TestLiftNotAnnounced(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nopub", Password: "pw"})
	t.Cleanup(func() { c.Close() })
	l, err := limiter.NewRedis(c, limiter.WithPrefix("ops"))
	if err != nil {
		t.Fatal(err)
	}
	// Penalize publishes from its script, which this user may not: the
	// penalty is written as the limiter writes it.
	v := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10) + "|x"
	if err := srv.Client(t).Set(ctx, "{ops:g}:p:ip", v, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := l.Inspect(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	removed, err := l.LiftPenaltyIf(ctx, "g", "ip", &st.Groups[0].Penalties[0])
	if !removed || !errors.Is(err, limiter.ErrNotAnnounced) || !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("LiftPenaltyIf without PUBLISH: %v, %v; want removed and ErrNotAnnounced", removed, err)
	}
	if removed, err := l.LiftPenalty(ctx, "g", "ip"); removed || !errors.Is(err, limiter.ErrNotAnnounced) {
		t.Fatalf("LiftPenalty without PUBLISH: %v, %v", removed, err)
	}
}

// A lift leaves its mark beside the penalty key (with LiftPenalty and
// LiftPenaltyIf alike), living as long as the penalty would have, at least
// ten minutes; a new penalty on the scope deletes it, so that the new one,
// lost with Redis's data, is not read as lifted by a replica that re-reads
// it (TestLostStateIsNoLift in the root package).
func TestLiftLeavesAMarkThatANewPenaltyClears(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	l, err := limiter.NewRedis(srv.Client(t), limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t)
	mark := "{" + prefix + ":g}:l:ip"
	day := time.Now().Add(24 * time.Hour)
	if err := l.Penalize(ctx, "g", limiter.Penalty{Scope: "ip", Until: day, Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LiftPenalty(ctx, "g", "ip"); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, mark).Val(); ttl < 23*time.Hour || ttl > 25*time.Hour {
		t.Fatalf("the mark of a day's penalty lifted lives %v, want about a day", ttl)
	}
	if err := l.Penalize(ctx, "g", limiter.Penalty{Scope: "ip", Until: day, Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, mark).Val() != 0 {
		t.Fatal("the mark of the earlier lift outlived a new penalty")
	}
	// A lift of nothing, as shown: a mark of the least length.
	if _, err := l.LiftPenaltyIf(ctx, "g", "none", nil); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, "{"+prefix+":g}:l:none").Val(); ttl < 9*time.Minute || ttl > 10*time.Minute {
		t.Fatalf("the mark of a lift of nothing lives %v, want 10 minutes", ttl)
	}
}
