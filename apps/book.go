package apps

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/internal/tokenform"
	"github.com/quotaware/throttle/providers"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Defaults, in one place.
const (
	// defaultTTL is a token's lifetime when its exchange states none: every
	// provider documents about 7,200 s.
	defaultTTL = 2 * time.Hour
	// maxTTL caps a stated lifetime, so a wrong answer cannot pin an entry.
	maxTTL = 30 * 24 * time.Hour
	// defaultNegativeTTL is how long a token nobody knows stays unknown
	// before the Book asks Redis again.
	defaultNegativeTTL = 2 * time.Second
	// defaultRedisTimeout bounds one Redis call on the request path. It is
	// generous because a replica asks Redis once per token it did not
	// learn itself, and an answer that comes late still beats charging
	// the token's calls to the wrong app.
	defaultRedisTimeout = 500 * time.Millisecond
	// errorTTL is how long a token stays unknown after Redis failed to
	// answer for it.
	errorTTL = 250 * time.Millisecond
	// defaultMaxTokens bounds the local cache; past it, expired entries go
	// first, then arbitrary ones (they are re-read from Redis when needed).
	defaultMaxTokens = 1 << 20
	// minKeyLen is the shortest HMAC key Config.Key accepts.
	minKeyLen = 16
)

// Stats counts what a Book did since it was made.
type Stats struct {
	Learned      int64 // tokens learned from exchanges or Learn
	LocalHits    int64 // lookups answered from memory (known or known unknown)
	RedisLookups int64 // lookups that asked Redis
	RedisFound   int64 // ... and found the token there
	RedisErrors  int64 // Redis calls that failed or timed out
	Unknown      int64 // requests whose token nobody knew, or that carried none readable
	NoToken      int64 // ... of which carried no token the Book could read
	Heard        int64 // announcements of other replicas that Redis confirmed
	Rejected     int64 // announcements dropped: malformed, unconfirmed, or over the queue
	Conflicts    int64 // tokens claimed for two apps, trusted for neither
	Refused      int64 // exchange answers not learned: wrong host, failed checks
	Tokens       int   // entries in the local cache, unknown ones included
	Apps         int   // identities the cache entries hold
	KeyMismatch  bool  // Redis holds entries written with another key (see KeyCheck)
}

// Book learns and remembers which app each access token belongs to. It is
// safe for concurrent use. A Transport builds its own from the Config given
// to throttle.WithApps, reached with Transport.Apps; New builds one apart,
// for tests and for code that observes exchanges without a Transport.
type Book struct {
	cfg    config
	hashes sync.Pool // *hasher
	shards [nShards]shard
	epoch  time.Time                           // entry expiries count ticks from here
	hosts  map[string]func(*http.Request) bool // the provider's hosts (providers.MatchHosts)
	fp     string                              // fingerprint of the key (redis.go)

	flightMu sync.Mutex
	flights  map[tokenHash]*flight // Redis lookups in progress

	// Interned identities (intern.go). Lock order: a shard, then idMu.
	idMu   sync.RWMutex
	ids    []idSlot // by index; ids[0] is noApp
	idIdx  map[App]uint32
	idFree []uint32

	learned, localHits, redisLookups, redisFound, redisErrors, unknown, noToken atomic.Int64
	heardCount, rejected, conflicts, refused                                    atomic.Int64

	keyErr       atomic.Pointer[error] // ErrKeyMismatch once seen
	conflictOnce sync.Once             // the first conflict is logged
	listener     *listener             // nil without Redis
	closeOnce    sync.Once

	unknownCounter metric.Int64Counter
	learnedCounter metric.Int64Counter
}

// New returns a Book, or an error naming the Config field at fault. With
// Redis it checks that the entries in Redis were written with the
// same key (see KeyCheck) and starts listening to the other replicas.
func New(cfg Config) (*Book, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if len(c.key) == 0 {
		// Local only: the hash never leaves the process, any key will do.
		c.key = make([]byte, 32)
		_, _ = rand.Read(c.key)
	}
	b := &Book{
		cfg:     c,
		flights: make(map[tokenHash]*flight),
		epoch:   c.now().Add(-time.Second),
		ids:     []idSlot{{}},
		idIdx:   map[App]uint32{},
		hosts:   make(map[string]func(*http.Request) bool, len(c.hosts)),
		fp:      fingerprintOf(c.key),
	}
	for p, hs := range c.hosts {
		b.hosts[p] = providers.MatchHosts(hs...)
	}
	key := c.key
	b.hashes.New = func() any { return &hasher{mac: hmac.New(sha256.New, key)} }
	for i := range b.shards {
		b.shards[i].m = make(map[tokenHash]entry)
		b.shards[i].sweepAt = 64
	}
	mp := c.meter
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/quotaware/throttle/apps")
	b.unknownCounter, _ = m.Int64Counter("throttle.apps.unknown", metric.WithUnit("{request}"),
		metric.WithDescription("Requests whose access token no replica had learned, or that carried none readable: charged to the preset's default app or shared scope."))
	b.learnedCounter, _ = m.Int64Counter("throttle.apps.learned", metric.WithUnit("{token}"),
		metric.WithDescription("Access tokens learned from token exchanges."))
	if c.rdb != nil {
		b.checkKey()
		b.listener = b.listen()
	}
	return b, nil
}

// Close stops listening to the other replicas' announcements (a Book on
// Redis listens from New on). Lookups and learning keep working, through
// Redis calls.
func (b *Book) Close() error {
	b.closeOnce.Do(func() {
		if b.listener != nil {
			b.listener.stop()
		}
	})
	return nil
}

// MustNew is New that panics on an invalid Config, for package-level use.
func MustNew(cfg Config) *Book {
	b, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return b
}

// Stats returns the counters so far.
func (b *Book) Stats() Stats {
	s := Stats{
		Learned: b.learned.Load(), LocalHits: b.localHits.Load(), RedisLookups: b.redisLookups.Load(),
		RedisFound: b.redisFound.Load(), RedisErrors: b.redisErrors.Load(), Unknown: b.unknown.Load(),
		NoToken: b.noToken.Load(), Heard: b.heardCount.Load(), Rejected: b.rejected.Load(),
		Conflicts: b.conflicts.Load(), Refused: b.refused.Load(), Apps: b.interned(),
		KeyMismatch: b.keyErr.Load() != nil,
	}
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.RLock()
		s.Tokens += len(sh.m)
		sh.mu.RUnlock()
	}
	return s
}

// Resolve returns req tagged with the app its access token belongs to, for
// a preset named provider to route. A request the caller tagged already
// (throttle.ContextWithApp) is returned as it is; so is one whose token is unknown,
// or that carries none the Book can read while provider needs one, which is
// counted as unknown.
//
// A token exchange of provider carries no access token of its own: it is
// tagged with the app (and org or tenant) it names in its query or body
// (the body is peeked at and replays whole), so that it is charged to that
// app rather than the preset's unknown scope, where every account's WeChat
// token quota would be one shared count; and it is marked as sent to the
// provider's profile, which is what lets Observe learn from its answer.
// A nil Book does only this.
func (b *Book) Resolve(req *http.Request, provider string) *http.Request {
	ctx := req.Context()
	if ex := exchangeFor(req.Method, apipath.Sent(req.URL)); ex != nil && ex.Provider == provider {
		if _, tagged := FromContext(ctx); !tagged {
			if app, ok := b.exchangeApp(req, ex); ok {
				ctx = NewContext(ctx, app)
			}
		}
		return req.WithContext(context.WithValue(ctx, sentKey{}, provider))
	}
	if b == nil {
		return req
	}
	if named, ok := FromContext(ctx); ok {
		if named.Provider == "" && named.Org == "" {
			// The caller's tag names no provider: note the token's app
			// too, from memory only (no Redis call for a tagged request),
			// for a preset that does not know the named app (TokenApp).
			if tok := tokenform.FromRequest(req); tok != "" {
				if app, ok := b.known(tok); ok && app.Provider == provider {
					return req.WithContext(withTokenApp(ctx, app))
				}
			}
		}
		return req
	}
	tok := tokenform.FromRequest(req)
	if tok == "" {
		tok = bodyToken(req, provider)
	}
	if tok == "" {
		if needsToken(provider, req) {
			b.noToken.Add(1)
			b.unknown.Add(1)
			b.unknownCounter.Add(ctx, 1, b.providerAttr(provider))
		}
		return req
	}
	if apipath.Clean(apipath.Sent(req.URL)) == dingtalkRobot {
		return req
	}
	app, ok := b.Lookup(ctx, tok)
	if !ok {
		b.unknown.Add(1)
		b.unknownCounter.Add(ctx, 1, b.providerAttr(provider))
		return req
	}
	return req.WithContext(NewContext(ctx, app))
}

// dingtalkRobot is DingTalk's custom group robot webhook, whose
// access_token names a robot, not an app: it is never learned, so it is
// not counted as unknown either.
const dingtalkRobot = "/robot/send"

// Lookup returns the app token belongs to: from memory, or from Redis when
// this replica has not seen the token yet. A token claimed for two apps
// belongs to none.
func (b *Book) Lookup(ctx context.Context, token string) (App, bool) {
	h := b.hash(token)
	now := b.tick(b.cfg.now())
	if app, e, ok := b.get(h, now); ok {
		b.localHits.Add(1)
		return app, e.app != noApp && e.app != conflictApp
	}
	if b.cfg.rdb == nil {
		b.put(h, App{}, noApp, now+ticks(b.cfg.negativeTTL), now)
		return App{}, false
	}
	return b.fetchOnce(ctx, h)
}

// known returns the app token belongs to when this replica holds it in
// memory; it never asks Redis.
func (b *Book) known(token string) (App, bool) {
	app, e, ok := b.get(b.hash(token), b.tick(b.cfg.now()))
	return app, ok && e.app != noApp && e.app != conflictApp
}

// flight is one Redis lookup that concurrent lookups of a token share.
type flight struct {
	done chan struct{}
	app  App
	ok   bool
}

// fetchOnce reads h from Redis, one call per token at a time: requests
// that arrive while it is in progress wait for its answer (or their
// context) instead of asking again.
func (b *Book) fetchOnce(ctx context.Context, h tokenHash) (App, bool) {
	b.flightMu.Lock()
	if f := b.flights[h]; f != nil {
		b.flightMu.Unlock()
		select {
		case <-f.done:
			return f.app, f.ok
		case <-ctx.Done():
			return App{}, false
		}
	}
	f := &flight{done: make(chan struct{})}
	b.flights[h] = f
	b.flightMu.Unlock()

	r, err := b.fetch(ctx, h)
	now := b.tick(b.cfg.now())
	switch {
	case r.found:
		b.keep(h, r, now)
	case err != nil:
		// Redis did not answer in time: ask again soon, since a slow
		// moment should not send the token's calls to the wrong app for
		// long, but not on every request, or an outage would hold each
		// one for the timeout.
		b.put(h, App{}, noApp, now+ticks(errorTTL), now)
	default:
		b.put(h, App{}, noApp, now+ticks(b.cfg.negativeTTL), now)
	}
	ok := r.found && !r.conflict
	f.app, f.ok = r.app, ok
	b.flightMu.Lock()
	delete(b.flights, h)
	b.flightMu.Unlock()
	close(f.done)
	return r.app, ok
}

// keep stores what Redis holds for h, for what is left of its lifetime.
func (b *Book) keep(h tokenHash, r stored, now uint32) {
	if r.conflict {
		b.put(h, App{}, conflictApp, now+ticks(r.ttl), now)
		return
	}
	b.put(h, r.app, noApp, now+ticks(r.ttl), now)
}

// Learn records that token belongs to app for ttl (2 hours when zero,
// at most 30 days), here and, with Redis, for every replica. Exchanges
// seen by Observe are learned this way; call it yourself for tokens fetched
// elsewhere. A token already known as another app's is trusted for
// neither from then on: Learn returns ErrConflict, and the first conflict
// is logged.
func (b *Book) Learn(ctx context.Context, token string, app App, ttl time.Duration) error {
	if token == "" || app.ID == "" {
		return errors.New("apps: Learn: token and app.ID must not be empty")
	}
	if err := checkIdentity(app); err != nil {
		return fmt.Errorf("apps: Learn: %w", err)
	}
	switch {
	case ttl <= 0:
		ttl = defaultTTL
	case ttl > maxTTL:
		ttl = maxTTL
	}
	app.Learned = true
	h := b.hash(token)
	now := b.tick(b.cfg.now())
	conflict := b.claim(h, app, now+ticks(ttl), now)
	if !conflict {
		b.learned.Add(1)
		b.learnedCounter.Add(ctx, 1, b.providerAttr(app.Provider))
	}
	if b.cfg.rdb != nil {
		c, err := b.store(ctx, h, app, ttl)
		if err != nil {
			return err
		}
		if c && !conflict {
			// Redis knew the token as another app's: trust it for neither
			// here too.
			b.put(h, App{}, conflictApp, now+ticks(ttl), now)
			conflict = true
		}
	}
	if conflict {
		b.conflict(app.Provider)
		return ErrConflict
	}
	return nil
}

// ErrConflict is returned by Learn for a token already known as another
// app's: the token is trusted for neither, so its requests are charged as
// unknown ones until it expires.
var ErrConflict = errors.New("apps: the token was claimed for two apps: trusted for neither")

// conflict counts a token claimed for two apps and logs the first one.
func (b *Book) conflict(provider string) {
	b.conflicts.Add(1)
	b.conflictOnce.Do(func() {
		b.cfg.logger.Warn("apps: a token was claimed for two apps and is trusted for neither: its requests are charged as unknown; "+
			"an exchange answered with another app's token (a proxy or a misbehaving gateway?); counted in Stats.Conflicts, logged once",
			"provider", provider)
	})
}

// tickLen is the unit of entry expiries: fine enough for errorTTL, coarse
// enough that a uint32 spans 13 years.
const tickLen = 100 * time.Millisecond

// tick is t in ticks since the Book's epoch.
func (b *Book) tick(t time.Time) uint32 {
	return uint32(t.Sub(b.epoch) / tickLen)
}

// ticks is d in ticks, rounded up and at least one.
func ticks(d time.Duration) uint32 {
	return uint32(max(1, (d+tickLen-1)/tickLen))
}

// tokenHash is HMAC-SHA256(key, token) cut to 128 bits: the only name a
// token has outside the request that carries it.
type tokenHash [16]byte

type hasher struct {
	mac hash.Hash
	buf []byte
	sum []byte
}

func (b *Book) hash(token string) tokenHash {
	hs := b.hashes.Get().(*hasher)
	hs.mac.Reset()
	hs.buf = append(hs.buf[:0], token...)
	hs.mac.Write(hs.buf)
	hs.sum = hs.mac.Sum(hs.sum[:0])
	var h tokenHash
	copy(h[:], hs.sum)
	clear(hs.buf) // the token must not linger in pooled memory
	b.hashes.Put(hs)
	return h
}
