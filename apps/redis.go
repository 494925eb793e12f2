package apps

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// sep separates the fields of a stored identity: a control character no
// provider's app or org ID contains.
const sep = "\x1f"

// redisKey names a token's entry: the Book's prefix and the hex of its
// keyed hash, never the token.
func (b *Book) redisKey(h tokenHash) string {
	return b.cfg.prefix + ":app:" + hex.EncodeToString(h[:])
}

// store shares a learned token with the other replicas, expiring with it.
func (b *Book) store(ctx context.Context, h tokenHash, app App, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.redisTimeout)
	defer cancel()
	val := app.Provider + sep + app.ID + sep + app.Org
	pipe := b.cfg.rdb.Pipeline()
	pipe.Set(ctx, b.redisKey(h), val, ttl)
	// Tell the replicas listening now, so that their first request with
	// the token needs no lookup either.
	pipe.Publish(ctx, b.channel(), hex.EncodeToString(h[:])+" "+strconv.FormatInt(ttl.Milliseconds(), 10)+" "+val)
	if _, err := pipe.Exec(ctx); err != nil {
		b.redisErrors.Add(1)
		return err
	}
	return nil
}

// channel is where replicas announce what they learned: the hash, the
// lifetime left and the app, never the token.
func (b *Book) channel() string { return b.cfg.prefix + ":apps" }

// subscribe starts listening to the other replicas' announcements: it
// waits (at most the Redis timeout) until Redis confirms the subscription,
// so that what is learned after New returns is heard, then keeps what
// arrives until stop is closed. go-redis resubscribes after a reconnect.
func (b *Book) subscribe(stop <-chan struct{}) {
	sub := b.cfg.rdb.Subscribe(context.Background(), b.channel())
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.redisTimeout)
	_, _ = sub.Receive(ctx)
	cancel()
	go func() {
		defer sub.Close()
		msgs := sub.Channel()
		for {
			select {
			case <-stop:
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				b.heard(m.Payload)
			}
		}
	}()
}

// heard stores one announcement: "<hex hash> <ttl ms> <provider>\x1f<app>\x1f<org>".
func (b *Book) heard(payload string) {
	hx, rest, _ := strings.Cut(payload, " ")
	ms, val, _ := strings.Cut(rest, " ")
	var h tokenHash
	if n, err := hex.Decode(h[:], []byte(hx)); err != nil || n != len(h) {
		return
	}
	ttlMS, err := strconv.ParseInt(ms, 10, 64)
	parts := strings.SplitN(val, sep, 3)
	if err != nil || ttlMS <= 0 || len(parts) != 3 || parts[1] == "" {
		return
	}
	app := App{Provider: parts[0], ID: parts[1], Org: parts[2], Learned: true}
	now := b.tick(b.cfg.now())
	b.put(h, entry{app: b.intern(app), exp: now + ticks(time.Duration(ttlMS)*time.Millisecond)}, now)
	b.heardCount.Add(1)
}

// fetch reads a token another replica learned, with what is left of its
// lifetime.
func (b *Book) fetch(ctx context.Context, h tokenHash) (App, time.Duration, bool, error) {
	b.redisLookups.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.redisTimeout)
	defer cancel()
	key := b.redisKey(h)
	pipe := b.cfg.rdb.Pipeline()
	get := pipe.Get(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		if errors.Is(err, redis.Nil) {
			return App{}, 0, false, nil
		}
		b.redisErrors.Add(1)
		return App{}, 0, false, err
	}
	parts := strings.SplitN(get.Val(), sep, 3)
	ttl := pttl.Val()
	if len(parts) != 3 || parts[1] == "" || ttl <= 0 {
		return App{}, 0, false, nil
	}
	b.redisFound.Add(1)
	return App{Provider: parts[0], ID: parts[1], Org: parts[2], Learned: true}, ttl, true, nil
}
