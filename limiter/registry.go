package limiter

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed registry.lua
var registrySource string

var registryScript = redis.NewScript(registrySource)

// registry keeps this replica's presence in Redis and counts the live
// replicas, so that each one knows its fair share of a rule (1/live) when
// Redis goes away and it must limit on its own. It beats in the background
// until close.
type registry struct {
	client redis.UniversalClient
	key    string
	id     string
	every  time.Duration
	// onCorrupt is told when the registry key held something else.
	onCorrupt func(key string)

	live atomic.Int64
	// counts are the counts of the last beats, and live their maximum: a
	// Redis that comes back empty sees the replicas re-register one by one,
	// and the first to beat would otherwise think itself alone and limit
	// at the full rate on its own. A replica that really left drops out of
	// the maximum len(counts) beats after it expired.
	counts    [4]int64
	next      int
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	// leave bounds the last beat, which takes the replica out of the
	// registry: set before stop is closed.
	leave context.Context
}

// startRegistry registers a new replica under prefix and beats every
// interval; a replica that stops beating drops out after three intervals.
// onCorrupt (may be nil) is told when the registry key held another type.
func startRegistry(client redis.UniversalClient, prefix string, every time.Duration, onCorrupt func(key string)) *registry {
	var b [8]byte
	_, _ = rand.Read(b[:])
	r := &registry{
		client:    client,
		key:       "{" + prefix + ":registry}:replicas",
		id:        hex.EncodeToString(b[:]),
		every:     every,
		onCorrupt: onCorrupt,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	r.live.Store(1)
	go r.run()
	return r
}

func (r *registry) run() {
	defer close(r.done)
	ticker := time.NewTicker(r.every)
	defer ticker.Stop()
	for {
		r.beat(context.Background(), false)
		select {
		case <-r.stop:
			r.beat(r.leave, true)
			return
		case <-ticker.C:
		}
	}
}

func (r *registry) beat(parent context.Context, leave bool) {
	ctx, cancel := context.WithTimeout(parent, r.every)
	defer cancel()
	flag := "0"
	if leave {
		flag = "1"
	}
	n, err := registryScript.Run(ctx, r.client, []string{r.key}, r.id, (3 * r.every).Milliseconds(), flag).Int64()
	if n < 0 {
		n = -n
		if r.onCorrupt != nil {
			r.onCorrupt(r.key)
		}
	}
	if err == nil && n >= 1 && !leave {
		r.counts[r.next] = n
		r.next = (r.next + 1) % len(r.counts)
		r.live.Store(max(r.counts[0], r.counts[1], r.counts[2], r.counts[3]))
	}
}

// Live is the number of live replicas (at least 1): the most seen over the
// last few beats. While Redis is away it keeps the last count, which is what
// the fallback needs.
func (r *registry) Live() int { return int(r.live.Load()) }

// Share is this replica's fair share of a rule: 1 / Live.
func (r *registry) Share() float64 { return 1 / float64(r.Live()) }

// stopAsync asks the beat to leave the registry and stop, without waiting;
// the leave gives up when ctx ends (a replica that could not leave drops
// out three beats later).
func (r *registry) stopAsync(ctx context.Context) {
	r.closeOnce.Do(func() {
		r.leave = ctx
		close(r.stop)
	})
}

// close leaves the registry and stops beating; it waits for the last beat
// (at most one beat interval, the beat's own timeout).
func (r *registry) close() {
	r.stopAsync(context.Background())
	<-r.done
}
