package apps

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/providers"
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
func (b *Book) store(ctx context.Context, h tokenHash, app providers.App, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.redisTimeout)
	defer cancel()
	val := app.Provider + sep + app.ID + sep + app.Org
	if err := b.cfg.rdb.Set(ctx, b.redisKey(h), val, ttl).Err(); err != nil {
		b.redisErrors.Add(1)
		return err
	}
	return nil
}

// fetch reads a token another replica learned, with what is left of its
// lifetime.
func (b *Book) fetch(ctx context.Context, h tokenHash) (providers.App, time.Duration, bool, error) {
	b.redisLookups.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.redisTimeout)
	defer cancel()
	key := b.redisKey(h)
	pipe := b.cfg.rdb.Pipeline()
	get := pipe.Get(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		if errors.Is(err, redis.Nil) {
			return providers.App{}, 0, false, nil
		}
		b.redisErrors.Add(1)
		return providers.App{}, 0, false, err
	}
	parts := strings.SplitN(get.Val(), sep, 3)
	ttl := pttl.Val()
	if len(parts) != 3 || parts[1] == "" || ttl <= 0 {
		return providers.App{}, 0, false, nil
	}
	b.redisFound.Add(1)
	return providers.App{Provider: parts[0], ID: parts[1], Org: parts[2], Learned: true}, ttl, true, nil
}
