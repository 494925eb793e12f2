package apps

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisKey names a token's entry: the Book's prefix and the hex of its
// keyed hash, never the token.
func (b *Book) redisKey(h tokenHash) string {
	return b.cfg.prefix + ":app:" + hex.EncodeToString(h[:])
}

// claimScript stores a token's identity unless Redis knows the token as
// another's: then the entry becomes the conflict marker, which no replica
// trusts, for the longer of the two lifetimes. It returns 1 on a conflict.
//
// KEYS[1] the entry; ARGV[1] the identity, ARGV[2] its lifetime in ms,
// ARGV[3] the conflict marker.
const claimScript = `
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  local ttl = math.max(tonumber(ARGV[2]), redis.call('PTTL', KEYS[1]))
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ttl)
  return 1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
`

// keyCheckScript keeps the fingerprint of the key the entries are written
// with, for at least ARGV[2] ms, and returns the one Redis holds.
//
// KEYS[1] the fingerprint's key; ARGV[1] this replica's fingerprint.
const keyCheckScript = `
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
if cur == ARGV[1] and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return cur
`

// store shares a learned token with the other replicas, expiring with it,
// and reports whether Redis knew it as another app's.
func (b *Book) store(ctx context.Context, h tokenHash, app App, ttl time.Duration) (conflict bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.redisTimeout)
	defer cancel()
	ms := strconv.FormatInt(max(1, ttl.Milliseconds()), 10)
	pipe := b.cfg.rdb.Pipeline()
	claim := pipe.Eval(ctx, claimScript, []string{b.redisKey(h)}, formatIdentity(app), ms, conflictValue)
	// The fingerprint lives as long as the longest entry written with it.
	fp := pipe.Eval(ctx, keyCheckScript, []string{b.fingerprintKey()}, b.fingerprint(), ms)
	// Tell the replicas listening now, so that their first request with
	// the token needs no lookup either. The message is only the hash: each
	// replica reads what it means from Redis.
	pipe.Publish(ctx, b.channel(), hex.EncodeToString(h[:]))
	if _, err := pipe.Exec(ctx); err != nil {
		b.redisErrors.Add(1)
		return false, err
	}
	if v, err := fp.Text(); err == nil {
		b.sameKey(v)
	}
	n, _ := claim.Int64()
	return n == 1, nil
}

// channel is where replicas announce what they learned: the hash, never
// the token.
func (b *Book) channel() string { return b.cfg.prefix + ":apps" }

// stored is what Redis holds for a token.
type stored struct {
	app      App
	ttl      time.Duration // what is left, at most maxTTL
	found    bool          // an identity or the conflict marker
	conflict bool
}

// fetch reads a token another replica learned, with what is left of its
// lifetime (at most maxTTL, whatever Redis says).
func (b *Book) fetch(ctx context.Context, h tokenHash) (stored, error) {
	b.redisLookups.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.redisTimeout)
	defer cancel()
	key := b.redisKey(h)
	pipe := b.cfg.rdb.Pipeline()
	get := pipe.Get(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		if errors.Is(err, redis.Nil) {
			return stored{}, nil
		}
		b.redisErrors.Add(1)
		return stored{}, err
	}
	r := readStored(get.Val(), pttl.Val())
	if r.found && !r.conflict {
		b.redisFound.Add(1)
	}
	return r, nil
}

// readStored checks what Redis holds for a token: a value that is neither
// an identity nor the conflict marker, or that does not expire, is as good
// as none.
func readStored(v string, ttl time.Duration) stored {
	if ttl <= 0 {
		return stored{}
	}
	ttl = min(ttl, maxTTL)
	if v == conflictValue {
		return stored{found: true, conflict: true, ttl: ttl}
	}
	app, ok := parseIdentity(v)
	if !ok {
		return stored{}
	}
	return stored{app: app, ttl: ttl, found: true}
}

// The key fingerprint: replicas must hash tokens with one key, or each
// finds nothing the others learned. A fingerprint of the key (an HMAC of a
// fixed string, which tells nothing of the key) is kept beside the entries,
// and a replica whose key differs says so.

// ErrKeyMismatch is KeyCheck's answer when the entries in Redis were
// written with another key than this Book's.
var ErrKeyMismatch = errors.New("apps: the entries in Redis were written with another Config.Key: " +
	"this replica finds none of the tokens the others learned, and they none of its")

func (b *Book) fingerprintKey() string { return b.cfg.prefix + ":apps:key" }

func (b *Book) fingerprint() string { return b.fp }

func fingerprintOf(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("throttle/apps key fingerprint v1"))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// checkKey compares this Book's fingerprint with Redis's at start.
func (b *Book) checkKey() {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.redisTimeout)
	defer cancel()
	ms := strconv.FormatInt(defaultTTL.Milliseconds(), 10)
	v, err := b.cfg.rdb.Eval(ctx, keyCheckScript, []string{b.fingerprintKey()}, b.fingerprint(), ms).Text()
	if err != nil {
		b.redisErrors.Add(1)
		b.cfg.logger.Warn("apps: could not compare this replica's key with the other replicas' (Redis did not answer); checked again on every exchange",
			"error", err)
		return
	}
	b.sameKey(v)
}

// sameKey records and logs, once, a fingerprint in Redis that is not this
// Book's.
func (b *Book) sameKey(inRedis string) {
	if inRedis == "" || inRedis == b.fingerprint() {
		return
	}
	err := ErrKeyMismatch
	if b.keyErr.CompareAndSwap(nil, &err) {
		b.cfg.logger.Error("apps: this replica's Config.Key differs from the one the entries in Redis were written with: "+
			"tokens learned by one replica are unknown to the others (charged to the preset's default app or shared scope); "+
			"give every replica the same key", "prefix", b.cfg.prefix)
	}
}

// KeyCheck returns ErrKeyMismatch once this Book found that the entries in
// Redis were written with another key (at New, or when it stored a token),
// nil otherwise. New does not fail on it: during a key rotation replicas
// with both keys run side by side, and a mismatch costs what unknown tokens
// cost, not correctness. A service that wants to refuse to start calls it
// after New.
func (b *Book) KeyCheck() error {
	if p := b.keyErr.Load(); p != nil {
		return *p
	}
	return nil
}
