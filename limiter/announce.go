package limiter

import (
	"cmp"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/heard"
	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Announcements: penalize.lua publishes every penalty it records, and
// replicas announce that Redis answers again after an outage, on one
// Pub/Sub channel per prefix.
//
// A message is a header line "v<version> <type>" and the type's fields, one
// per line:
//
//	v1 penalty\n<group>\n<scope>\n<until µs>\n<code>
//	v1 back
//	v1 lift\n<group>\n<scope>
//
// (LiftPenalty announces a lift as "\x00lift\n<group>\n<scope>", read the
// same way.)
// Anyone who can PUBLISH on the server can send anything, so a message is
// only a hint: a penalty opens a breaker only once the penalty key in Redis
// confirms it (with the end stored there, not the message's), and a lift
// only once the key is gone. Messages of an unknown type or a later version
// are ignored, so new types can be added without breaking older replicas.
// Unversioned messages of earlier releases ("group\nscope\nuntil\ncode" and
// "\x00back") are still read.

// channel is where penalties are announced.
func (l *redisLimiter) channel() string { return l.prefix + ":penalties" }

const (
	announceVersion = "v1"
	penaltyType     = "penalty"
	backType        = "back"
	liftType        = "lift"
)

// penaltyHeader is what penalize.lua's announcement of a penalty on scope
// of group starts with; the script appends the end and the code.
func penaltyHeader(group, scope string) string {
	return announceVersion + " " + penaltyType + "\n" + group + "\n" + scope + "\n"
}

// announcement is one parsed message.
type announcement struct {
	kind         string // penaltyType, backType, liftType, or another type
	group, scope string
}

// maxAnnouncement bounds a message: a header, two keys of at most
// rulecore.MaxKeyLen, an end and a provider's code fit well within it.
const maxAnnouncement = 2048

// parseAnnouncement reads a message; ok is false when it is malformed.
func parseAnnouncement(s string) (a announcement, ok bool) {
	if len(s) > maxAnnouncement {
		return announcement{}, false
	}
	switch {
	case s == legacyBack:
		return announcement{kind: backType}, true
	case strings.HasPrefix(s, liftPrefix):
		group, scope, ok := parseLift(s)
		return announcement{kind: liftType, group: group, scope: scope}, ok
	case !versioned(s):
		// An earlier release's penalty: "group\nscope\nuntil\ncode" (a
		// group may start with "v": "vendor").
		group, rest, ok1 := strings.Cut(s, "\n")
		scope, rest, ok2 := strings.Cut(rest, "\n")
		until, _, ok3 := strings.Cut(rest, "\n")
		if _, err := strconv.ParseInt(until, 10, 64); !ok1 || !ok2 || !ok3 || err != nil || checkGroup(group) != nil || rulecore.CheckKey(scope) != nil {
			return announcement{}, false
		}
		return announcement{kind: penaltyType, group: group, scope: scope}, true
	}
	head, rest, _ := strings.Cut(s, "\n")
	version, kind, _ := strings.Cut(head, " ")
	if kind == "" {
		return announcement{}, false
	}
	if version != announceVersion {
		// A later version: not ours to read, whatever its type says (its
		// fields may differ), so it carries no kind.
		return announcement{}, true
	}
	a.kind = kind
	if kind != penaltyType && kind != liftType {
		return a, true // another type: not ours to read
	}
	var ok1, ok2 bool
	a.group, rest, ok1 = strings.Cut(rest, "\n")
	a.scope, _, ok2 = strings.Cut(rest, "\n")
	if !ok1 || (!ok2 && kind == penaltyType) || checkGroup(a.group) != nil || rulecore.CheckKey(a.scope) != nil {
		return announcement{}, false
	}
	return a, true
}

// versioned reports whether s leads with a version header, "v<digits>
// <type>", rather than an earlier release's group name.
func versioned(s string) bool {
	head, _, _ := strings.Cut(s, "\n")
	version, _, spaced := strings.Cut(head, " ")
	if !spaced || len(version) < 2 || version[0] != 'v' {
		return false
	}
	for _, c := range version[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// announcePenalty announces a penalty already written, again: the message
// penalize.lua sends, which watchers confirm against the key as always.
func (l *redisLimiter) announcePenalty(ctx context.Context, group string, p Penalty) error {
	msg := penaltyHeader(group, p.Scope) + strconv.FormatInt(p.Until.UnixMicro(), 10) + "\n" + p.Code
	if err := l.client.Publish(ctx, l.channel(), msg).Err(); err != nil {
		return unavailable("publish", err)
	}
	return nil
}

// legacyBack is an earlier release's "Redis is back" message.
const legacyBack = "\x00back"

// announceBack tells every watching replica that Redis answers again.
func (l *redisLimiter) announceBack(ctx context.Context) error {
	if err := l.client.Publish(ctx, l.channel(), announceVersion+" "+backType).Err(); err != nil {
		return unavailable("publish", err)
	}
	return nil
}

// watcherConfig says what a watcher does with what it hears.
type watcherConfig struct {
	// onPenalty is told of a penalty that Redis confirms.
	onPenalty func(group string, p Penalty)
	// onLift is told of a lifted penalty whose key is gone.
	onLift func(group, scope string)
	// onBack is told that a replica found Redis back.
	onBack func()
	// onRejected is told of a message it ignored, and why.
	onRejected func(reason string)
	// onSubscribe is told when Redis refuses the subscription (with its
	// error) and when it is in place again (nil).
	onSubscribe func(err error)
	// pingEvery is how long a quiet subscription waits before it pings,
	// and then for the answer (0: the package's pingEvery).
	pingEvery time.Duration
}

// maxUnconfirmed bounds the announcements waiting for Redis to confirm
// them; more are dropped (and reported): the penalty key still refuses
// every reserve, which is the guarantee, and the announcement only the
// speed-up. Announcements of one scope waiting together cost one read.
const maxUnconfirmed = 256

// watcher follows the announcement channel and confirms what it hears.
type watcher struct {
	l   *redisLimiter
	cfg watcherConfig
	ps  *redis.PubSub

	pending *heard.Queue[penaltyID, string] // scope -> the type to confirm
	done    sync.WaitGroup
	once    sync.Once
	quit    chan struct{}
	stopped atomic.Bool

	// refused is set while Redis refuses the subscription; known are the
	// penalties this replica met (end, local clock), which it then re-reads
	// every pollEvery to hear of lifts without announcements.
	refused atomic.Bool
	// subscribedOnce is set at the first subscription; recheck asks poll
	// for one pass of the known penalties at once, after every later one:
	// a lift announced while the subscription was being made again (a
	// network blip, a failover, a killed client) reached no one here, and
	// the replica's breaker would refuse the scope until the penalty's end.
	subscribedOnce atomic.Bool
	recheck        chan struct{}
	// liftedAt is when this replica lifted a penalty itself (after the
	// key went): a confirmation whose read was sent before then may have
	// read the key before it went, and would open the breakers again
	// behind the lift (a lift right after the penalty's own
	// announcement). Entries older than a confirmation's timeout go.
	liftMu   sync.Mutex
	liftedAt map[penaltyID]time.Time
	knownMu  sync.Mutex
	known    map[penaltyID]time.Time
}

// Timing of the watch: how long a receive waits before pinging the
// connection, and then for the answer (a connection that does not answer
// is replaced), how often a refused
// subscription is asked again, and how often known penalties are re-read
// while it is refused.
var (
	pingEvery        = 15 * time.Second
	resubscribeEvery = 5 * time.Second
	pollEvery        = time.Second
)

// maxKnown bounds the penalties re-read while the subscription is refused.
const maxKnown = 1024

// watch starts following the channel in the background, reconnecting after
// outages, until stop. Announcements missed while disconnected are not
// replayed.
func (l *redisLimiter) watch(cfg watcherConfig) *watcher {
	w := &watcher{l: l, cfg: cfg, ps: l.client.Subscribe(context.Background(), l.channel()),
		pending: heard.New[penaltyID, string](maxUnconfirmed), quit: make(chan struct{}),
		known: make(map[penaltyID]time.Time), recheck: make(chan struct{}, 1), liftedAt: make(map[penaltyID]time.Time)}
	w.done.Add(3)
	go w.listen()
	go w.confirm()
	go w.poll()
	return w
}

// listen receives from the subscription itself rather than through
// PubSub.Channel, which drops errors: a subscription Redis refuses (an ACL
// user without SUBSCRIBE or the channel) is reported and asked again.
func (w *watcher) listen() {
	defer w.done.Done()
	defer w.pending.Close()
	ctx := context.Background()
	every := cmp.Or(w.cfg.pingEvery, pingEvery)
	pinged := false // a ping was sent, and nothing has come since
	for {
		var msg any
		var err error
		if pinged {
			// The ping's answer is due. A receive without a timeout of its
			// own, bounded by its context, fails when nothing comes, and
			// go-redis then drops the connection, to subscribe again on the
			// next receive: a connection that takes the ping and delivers
			// nothing (a peer gone without a reset, a proxy holding it
			// open) was otherwise pinged every quiet spell, for good, and
			// this replica heard no penalty or lift meanwhile.
			pctx, cancel := context.WithTimeout(ctx, every)
			msg, err = w.ps.ReceiveTimeout(pctx, 0)
			cancel()
		} else {
			msg, err = w.ps.ReceiveTimeout(ctx, every)
		}
		if w.stopped.Load() {
			return
		}
		if err == nil {
			pinged = false
		}
		var rerr redis.Error
		var nerr net.Error
		switch {
		case err == nil:
		case errors.As(err, &rerr):
			w.subscribed(err)
			if !w.pause(resubscribeEvery) {
				return
			}
			_ = w.ps.Subscribe(ctx, w.l.channel())
			continue
		case !pinged && errors.As(err, &nerr) && nerr.Timeout():
			// Quiet: a ping proves the connection.
			pinged = w.ps.Ping(ctx) == nil
			continue
		default:
			// Redis away, or no answer to the ping: the next receive
			// reconnects and subscribes.
			pinged = false
			if !w.pause(100 * time.Millisecond) {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				w.subscribed(nil)
				if w.subscribedOnce.Swap(true) {
					select {
					case w.recheck <- struct{}{}:
					default: // a pass is already due
					}
				}
			}
		case *redis.Message:
			w.hear(m.Payload)
		}
	}
}

// subscribed records whether the subscription is in place.
func (w *watcher) subscribed(err error) {
	if was := w.refused.Swap(err != nil); err == nil && !was {
		return
	}
	if w.cfg.onSubscribe != nil {
		w.cfg.onSubscribe(err)
	}
}

// pause waits d, or returns false once the watch stops.
func (w *watcher) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.quit:
		return false
	case <-t.C:
		return true
	}
}

// hear handles one message.
func (w *watcher) hear(payload string) {
	a, ok := parseAnnouncement(payload)
	switch {
	case !ok:
		w.reject("malformed")
	case a.kind == backType:
		if w.cfg.onBack != nil {
			w.cfg.onBack()
		}
	case a.kind == penaltyType || a.kind == liftType:
		// The last word on a scope is the one to confirm.
		if !w.pending.Add(penaltyID{a.group, a.scope}, func(string, bool) string { return a.kind }) {
			w.reject("queue full")
		}
	}
}

// confirm reads the penalty keys of the queued announcements, in one round
// trip per batch, and passes on what they confirm. A lift is confirmed by
// its key gone and the mark a lift leaves beside it (lift.go), as the poll
// confirms one: a key gone without its mark went with Redis's data (a
// restart without persistence, a FLUSHALL), and a message anyone allowed
// to publish can send must not end every replica's penalty then.
func (w *watcher) confirm() {
	defer w.done.Done()
	for {
		batch, ok := w.pending.Next()
		if !ok {
			return
		}
		ids := make([]penaltyID, 0, len(batch))
		ends := make([]time.Time, 0, len(batch)) // the known penalties' as the reads are sent
		cmds := make([]*redis.StringCmd, 0, len(batch))
		marks := make([]*redis.IntCmd, 0, len(batch))
		ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
		pipe := w.l.client.Pipeline()
		for id := range batch {
			ids, ends = append(ids, id), append(ends, w.knownEnd(id))
			cmds = append(cmds, pipe.Get(ctx, w.l.penaltyKey(id.group, id.scope)))
			var mark *redis.IntCmd
			if batch[id] == liftType {
				mark = pipe.Exists(ctx, w.l.markKey(id.group, id.scope))
			}
			marks = append(marks, mark)
		}
		clock := pipe.Time(ctx)
		sent := time.Now()
		_, _ = pipe.Exec(ctx)
		cancel()
		// The stored ends are on Redis's clock: moved to this replica's.
		skew := clockSkew(clock, sent, time.Now())
		for i, id := range ids {
			v, err := cmds[i].Result()
			if err != nil && err != redis.Nil {
				// Redis did not answer: the next reserve sees the key.
				w.reject("unconfirmed: " + err.Error())
				continue
			}
			until, code, ok := penaltyEnd(v)
			until = until.Add(-skew)
			live := err == nil && ok && until.After(time.Now())
			// The key decides, not the announcement: the queue keeps the
			// last word on a scope, and a lift heard right after a
			// penalty (one spoofed, or an operator's of an older one)
			// must not hide a penalty that is in Redis.
			switch {
			case live && w.liftedSince(id, sent):
				// Read before this replica's own lift took the key.
				w.reject("lifted here since")
			case live:
				if batch[id] == liftType {
					w.reject("penalty still in Redis")
				}
				w.remember(id.group, Penalty{Scope: id.scope, Until: until})
				if w.cfg.onPenalty != nil {
					w.cfg.onPenalty(id.group, Penalty{Scope: id.scope, Until: until, Code: code})
				}
			case batch[id] == penaltyType:
				w.reject("no penalty in Redis")
			case marks[i] == nil || marks[i].Val() == 0:
				// Unmarked (or the read failed): the penalty stays until
				// its end, or until the poll finds the mark.
				w.reject("lift without its mark in Redis")
			case !w.forgetUnlessRenewed(id, ends[i]):
				// A penalty recorded here while the read was in flight
				// stands: no lift to pass on.
			case w.cfg.onLift != nil:
				w.cfg.onLift(id.group, id.scope)
			}
		}
	}
}

func (w *watcher) reject(reason string) {
	if w.cfg.onRejected != nil {
		w.cfg.onRejected(reason)
	}
}

// stop ends the watch and waits for its goroutines.
func (w *watcher) stop() {
	w.stopAsync()
	w.done.Wait()
}

// stopAsync ends the watch without waiting. Closing the subscription waits
// for a receive in progress, which holds it while (re)subscribing to a Redis
// that does not answer, for up to the client's read timeout: it is closed on
// a goroutine of its own, counted in done.
func (w *watcher) stopAsync() {
	w.once.Do(func() {
		w.stopped.Store(true)
		close(w.quit)
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			w.ps.Close()
		}()
	})
}

// clockSkew is how far Redis's clock (its TIME, asked between sent and
// got) is ahead of this replica's, or 0 within maxClockSkew or when the
// TIME failed.
func clockSkew(t *redis.TimeCmd, sent, got time.Time) time.Duration {
	at, err := t.Result()
	if err != nil {
		return 0
	}
	return skewBeyondBound(at, sent.Add(got.Sub(sent)/2))
}

// penaltyEnd reads a penalty key's value, "<end µs>|<code>".
func penaltyEnd(v string) (until time.Time, code string, ok bool) {
	end, code, _ := strings.Cut(v, "|")
	us, err := strconv.ParseInt(end, 10, 64)
	if err != nil || us <= 0 || us > maxStoredUs {
		return time.Time{}, "", false
	}
	return time.UnixMicro(us), capCode(code), true
}
