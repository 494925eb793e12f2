package limiter

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Penalty announcements: penalize.lua publishes every penalty it records,
// and replicas announce that Redis answers again after an outage.

// channel is where penalties are announced.
func (l *Redis) channel() string { return l.prefix + ":penalties" }

// WatchPenalties calls onPenalty for every penalty any replica records
// through a limiter with the same prefix, as Redis announces it (Pub/Sub),
// so a replica can stop a scope at once instead of on its next reserve; and
// onBack (if not nil) when a replica announces that Redis answers again
// after an outage (see AnnounceBack), so replicas still limiting on their own
// ask Redis at once rather than at their next probe. It runs in the
// background, reconnecting after outages, until stop is called.
// Announcements missed while disconnected are not replayed: the penalty key
// still refuses every reserve, which is the guarantee; this is the speed-up.
func (l *Redis) WatchPenalties(onPenalty func(group string, p Penalty), onBack func(), opts ...WatchOption) (stop func()) {
	wc := watchConfigOf(opts)
	ps := l.client.Subscribe(context.Background(), l.channel())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ps.Channel() {
			if msg.Payload == backAnnouncement {
				if onBack != nil {
					onBack()
				}
				continue
			}
			if strings.HasPrefix(msg.Payload, liftPrefix) {
				l.handleLift(&wc, msg.Payload)
				continue
			}
			if group, p, ok := parseAnnouncement(msg.Payload); ok && onPenalty != nil {
				onPenalty(group, p)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ps.Close()
			<-done
		})
	}
}

// backAnnouncement says that Redis answers again; a penalty announcement
// always starts with a group name, never with a NUL.
const backAnnouncement = "\x00back"

// AnnounceBack tells every watching replica that Redis answers again.
func (l *Redis) AnnounceBack(ctx context.Context) error {
	if err := l.client.Publish(ctx, l.channel(), backAnnouncement).Err(); err != nil {
		return unavailable("publish", err)
	}
	return nil
}

// parseAnnouncement reads "group\nscope\nuntil µs\ncode".
func parseAnnouncement(s string) (string, Penalty, bool) {
	group, rest, ok1 := strings.Cut(s, "\n")
	scope, rest, ok2 := strings.Cut(rest, "\n")
	until, code, ok3 := strings.Cut(rest, "\n")
	us, err := strconv.ParseInt(until, 10, 64)
	if !ok1 || !ok2 || !ok3 || err != nil {
		return "", Penalty{}, false
	}
	return group, Penalty{Scope: scope, Until: time.UnixMicro(us), Code: code}, true
}
