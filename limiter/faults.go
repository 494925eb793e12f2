package limiter

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Faults of the announcement channel: a Redis user without SUBSCRIBE or
// PUBLISH rights (ACL) still limits correctly, since every reserve reads the
// penalty keys, but replicas stop hearing each other. Each fault is logged
// once when it starts and once when it clears, and while it lasts the
// replica keeps "{<prefix>:registry}:fault:<replica id>" in Redis, one line
// "<what>: <error text>" per fault (what is "subscribe" or "publish"), with
// a TTL of faultTTL renewed every faultRenew, so that throttlectl status can
// show it; the key goes once the faults clear.

const (
	faultSubscribe = "subscribe"
	faultPublish   = "publish"
	faultTTL       = time.Minute
	faultRenew     = 20 * time.Second
)

// faultMeaning says what each fault means for the fleet, for the log.
var faultMeaning = map[string]string{
	faultSubscribe: "the Redis user may not SUBSCRIBE to the announcement channel: this replica will not hear other replicas' penalties, " +
		"lifts and \"Redis is back\" until it may (it re-checks the penalties it knows of in Redis every second instead)",
	faultPublish: "the Redis user may not PUBLISH on the announcement channel: penalties this replica writes are not announced, " +
		"so other replicas meet them only on their next request to the scope, and they will not hear its lifts and \"Redis is back\" until it may",
}

// faults tracks this replica's announcement faults and keeps their key.
type faults struct {
	client redis.UniversalClient
	key    string
	log    func(msg string, clear bool)

	mu      sync.Mutex
	active  map[string]string // what -> error text
	written bool              // the key may be in Redis
	wake    chan struct{}
}

func newFaults(client redis.UniversalClient, prefix, id string, log func(msg string, clear bool)) *faults {
	return &faults{client: client, key: "{" + prefix + ":registry}:fault:" + id, log: log,
		active: make(map[string]string), wake: make(chan struct{}, 1)}
}

// set records what failing with err (nil: it works), logging a change.
func (f *faults) set(what string, err error) {
	f.mu.Lock()
	_, was := f.active[what]
	switch {
	case err != nil:
		f.active[what] = err.Error()
	case was:
		delete(f.active, what)
	default:
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	switch {
	case err != nil && !was:
		f.log(faultMeaning[what]+": "+err.Error(), false)
	case err == nil:
		f.log("the Redis user may "+strings.ToUpper(what)+" again on the announcement channel", true)
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// value is the key's value, "" when nothing fails.
func (f *faults) value() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	lines := make([]string, 0, len(f.active))
	for what, msg := range f.active {
		// One line each: a reader splits the value on newlines.
		lines = append(lines, what+": "+strings.ReplaceAll(msg, "\n", " "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// run keeps the key in step with the faults until stop.
func (f *faults) run(stop <-chan struct{}) {
	ticker := time.NewTicker(faultRenew)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			if f.written {
				f.sync("")
			}
			return
		case <-f.wake:
		case <-ticker.C:
		}
		if v := f.value(); v != "" || f.written {
			f.sync(v)
		}
	}
}

func (f *faults) sync(v string) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	if v == "" {
		if f.client.Del(ctx, f.key).Err() == nil {
			f.written = false
		}
		return
	}
	if f.client.Set(ctx, f.key, v, faultTTL).Err() == nil {
		f.written = true
	}
}
