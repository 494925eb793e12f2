package limiter

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/redis/go-redis/v9"
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

// parseAnnouncement reads a message; ok is false when it is malformed.
func parseAnnouncement(s string) (a announcement, ok bool) {
	switch {
	case s == legacyBack:
		return announcement{kind: backType}, true
	case strings.HasPrefix(s, liftPrefix):
		group, scope, ok := parseLift(s)
		return announcement{kind: liftType, group: group, scope: scope}, ok
	case !strings.HasPrefix(s, "v"):
		// An earlier release's penalty: "group\nscope\nuntil\ncode".
		group, rest, ok1 := strings.Cut(s, "\n")
		scope, rest, ok2 := strings.Cut(rest, "\n")
		until, _, ok3 := strings.Cut(rest, "\n")
		if _, err := strconv.ParseInt(until, 10, 64); !ok1 || !ok2 || !ok3 || err != nil || rulecore.CheckKey(group) != nil || rulecore.CheckKey(scope) != nil {
			return announcement{}, false
		}
		return announcement{kind: penaltyType, group: group, scope: scope}, true
	}
	head, rest, _ := strings.Cut(s, "\n")
	version, kind, _ := strings.Cut(head, " ")
	if _, err := strconv.Atoi(version[1:]); err != nil || kind == "" {
		return announcement{}, false
	}
	a.kind = kind
	if version != announceVersion || (kind != penaltyType && kind != liftType) {
		return a, kind != "" // another type or version: not ours to read
	}
	var ok1, ok2 bool
	a.group, rest, ok1 = strings.Cut(rest, "\n")
	a.scope, _, ok2 = strings.Cut(rest, "\n")
	if !ok1 || (!ok2 && kind == penaltyType) || rulecore.CheckKey(a.group) != nil || rulecore.CheckKey(a.scope) != nil {
		return announcement{}, false
	}
	return a, true
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

	mu      sync.Mutex
	pending map[penaltyID]string // scope -> the type to confirm
	wake    chan struct{}
	done    sync.WaitGroup
	once    sync.Once
}

// watch starts following the channel in the background, reconnecting after
// outages, until stop. Announcements missed while disconnected are not
// replayed.
func (l *redisLimiter) watch(cfg watcherConfig) *watcher {
	w := &watcher{l: l, cfg: cfg, ps: l.client.Subscribe(context.Background(), l.channel()),
		pending: make(map[penaltyID]string), wake: make(chan struct{}, 1)}
	w.done.Add(2)
	go w.listen()
	go w.confirm()
	return w
}

func (w *watcher) listen() {
	defer w.done.Done()
	defer close(w.wake)
	for msg := range w.ps.Channel() {
		a, ok := parseAnnouncement(msg.Payload)
		switch {
		case !ok:
			w.reject("malformed")
		case a.kind == backType:
			if w.cfg.onBack != nil {
				w.cfg.onBack()
			}
		case a.kind == penaltyType || a.kind == liftType:
			w.mu.Lock()
			id := penaltyID{a.group, a.scope}
			_, queued := w.pending[id]
			full := !queued && len(w.pending) >= maxUnconfirmed
			if !full {
				w.pending[id] = a.kind
			}
			w.mu.Unlock()
			if full {
				w.reject("queue full")
				continue
			}
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// confirm reads the penalty keys of the queued announcements, in one round
// trip per batch, and passes on what they confirm.
func (w *watcher) confirm() {
	defer w.done.Done()
	for range w.wake {
		w.mu.Lock()
		batch := w.pending
		w.pending = make(map[penaltyID]string, len(batch))
		w.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		ids := make([]penaltyID, 0, len(batch))
		cmds := make([]*redis.StringCmd, 0, len(batch))
		ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
		pipe := w.l.client.Pipeline()
		for id := range batch {
			ids = append(ids, id)
			cmds = append(cmds, pipe.Get(ctx, w.l.penaltyKey(id.group, id.scope)))
		}
		_, _ = pipe.Exec(ctx)
		cancel()
		for i, id := range ids {
			v, err := cmds[i].Result()
			if err != nil && err != redis.Nil {
				// Redis did not answer: the next reserve sees the key.
				w.reject("unconfirmed: " + err.Error())
				continue
			}
			until, code, ok := penaltyEnd(v)
			live := err == nil && ok && until.After(time.Now())
			switch batch[id] {
			case penaltyType:
				if !live {
					w.reject("no penalty in Redis")
					continue
				}
				if w.cfg.onPenalty != nil {
					w.cfg.onPenalty(id.group, Penalty{Scope: id.scope, Until: until, Code: code})
				}
			case liftType:
				if live {
					w.reject("penalty still in Redis")
					continue
				}
				if w.cfg.onLift != nil {
					w.cfg.onLift(id.group, id.scope)
				}
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
	w.once.Do(func() { w.ps.Close() })
	w.done.Wait()
}

// penaltyEnd reads a penalty key's value, "<end µs>|<code>".
func penaltyEnd(v string) (until time.Time, code string, ok bool) {
	end, code, _ := strings.Cut(v, "|")
	us, err := strconv.ParseInt(end, 10, 64)
	if err != nil || us <= 0 {
		return time.Time{}, "", false
	}
	return time.UnixMicro(us), code, true
}
