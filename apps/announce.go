package apps

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/heard"
)

// Announcements: a replica that learns a token publishes its hash on
// "<prefix>:apps", so that the others know it before their first request
// with it. Anyone who can PUBLISH on the server can send anything, so a
// message is only a hint, as penalty announcements are (limiter/announce.go):
// the listener reads the hash's entry from Redis and keeps what Redis holds
// there, for what is left of its lifetime (at most maxTTL). A message is
// "<32 hex digits>", optionally followed by a space and anything (an
// earlier release's "<hash> <ttl ms> <identity>", whose rest is ignored).

// maxAnnouncement bounds a message: an earlier release's is under 700
// bytes (hash, lifetime and an identity of bounded fields).
const maxAnnouncement = 1024

// parseAnnouncement reads a message; ok is false when it is malformed.
func parseAnnouncement(s string) (h tokenHash, ok bool) {
	if len(s) > maxAnnouncement {
		return h, false
	}
	hx, _, _ := strings.Cut(s, " ")
	if len(hx) != 2*len(h) {
		return h, false
	}
	if _, err := hex.Decode(h[:], []byte(hx)); err != nil {
		return tokenHash{}, false
	}
	return h, true
}

// maxUnconfirmed bounds the announcements waiting for Redis to confirm
// them; more are dropped and counted (Stats.Rejected): the entry in Redis
// is still read on the token's first request, the announcement only saves
// that read. Announcements of one token waiting together cost one read.
const maxUnconfirmed = 256

// listener follows the channel and confirms what it hears.
type listener struct {
	b    *Book
	ps   *redis.PubSub
	todo *heard.Queue[tokenHash, int64] // queued hashes, with how many messages named each
	done sync.WaitGroup
	once sync.Once
}

// listen starts listening to the other replicas' announcements: it waits
// (at most the Redis timeout) until Redis confirms the subscription, so
// that what is learned after New returns is heard. go-redis resubscribes
// after a reconnect.
func (b *Book) listen() *listener {
	l := &listener{b: b, ps: b.cfg.rdb.Subscribe(context.Background(), b.channel()),
		todo: heard.New[tokenHash, int64](maxUnconfirmed)}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.redisTimeout)
	_, _ = l.ps.Receive(ctx)
	cancel()
	l.done.Add(2)
	go l.receive()
	go l.confirm()
	return l
}

func (l *listener) receive() {
	defer l.done.Done()
	defer l.todo.Close()
	for m := range l.ps.Channel() {
		h, ok := parseAnnouncement(m.Payload)
		// Messages of one hash share a read, each counted.
		if !ok || !l.todo.Add(h, func(n int64, _ bool) int64 { return n + 1 }) {
			l.b.rejected.Add(1)
		}
	}
}

// confirm reads the entries of the queued hashes, one round trip per
// batch, and keeps what Redis holds.
func (l *listener) confirm() {
	defer l.done.Done()
	b := l.b
	for {
		batch, ok := l.todo.Next()
		if !ok {
			return
		}
		hs := make([]tokenHash, 0, len(batch))
		msgs := make([]int64, 0, len(batch))
		gets := make([]*redis.StringCmd, 0, len(batch))
		ttls := make([]*redis.DurationCmd, 0, len(batch))
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.redisTimeout)
		pipe := b.cfg.rdb.Pipeline()
		for h, n := range batch {
			hs = append(hs, h)
			msgs = append(msgs, n)
			gets = append(gets, pipe.Get(ctx, b.redisKey(h)))
			ttls = append(ttls, pipe.PTTL(ctx, b.redisKey(h)))
		}
		_, _ = pipe.Exec(ctx)
		cancel()
		now := b.tick(b.cfg.now())
		for i, h := range hs {
			v, err := gets[i].Result()
			if err != nil {
				if err != redis.Nil {
					b.redisErrors.Add(1)
				}
				b.rejected.Add(msgs[i])
				continue
			}
			r := readStored(v, ttls[i].Val())
			if !r.found {
				b.rejected.Add(msgs[i])
				continue
			}
			b.keep(h, r, now)
			b.heardCount.Add(msgs[i])
		}
	}
}

// stop ends the listening and waits for its goroutines.
func (l *listener) stop() {
	l.once.Do(func() { l.ps.Close() })
	l.done.Wait()
}
