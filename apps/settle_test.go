package apps_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
)

// processed is how many announcements b has dealt with, kept or dropped.
func processed(b *apps.Book) int64 { s := b.Stats(); return s.Heard + s.Rejected }

// checkReleased: identities whose entries expired are released once the
// cache sweeps them.
func checkReleased(t *testing.T, b *apps.Book) {
	t.Helper()
	now := time.Now()
	local := apps.MustNew(apps.WithTestClock(apps.Config{}, func() time.Time { return now }))
	ctx := context.Background()
	for i := range 1000 {
		_ = local.Learn(ctx, "token-"+strconv.Itoa(i), apps.App{Provider: "wechat", ID: "wx" + strconv.Itoa(i)}, time.Minute)
	}
	if got := local.Stats().Apps; got != 1000 {
		t.Fatalf("%d identities held for 1000 apps", got)
	}
	now = now.Add(2 * time.Minute)
	for i := range 2000 { // new tokens of one app sweep the expired ones
		_ = local.Learn(ctx, "later-token-"+strconv.Itoa(i), apps.App{Provider: "wechat", ID: "wxSame"}, time.Minute)
	}
	if got := local.Stats().Apps; got > 1 {
		t.Errorf("%d identities held after every entry of 1000 apps expired and was swept, want 1", got)
	}
	if s := b.Stats(); s.Apps != 0 {
		t.Errorf("%d identities held from unconfirmed announcements, want 0", s.Apps)
	}
}
