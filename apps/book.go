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

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Defaults, in one place.
const (
	// DefaultTTL is a token's lifetime when its exchange states none: every
	// provider documents about 7,200 s.
	DefaultTTL = 2 * time.Hour
	// MaxTTL caps a stated lifetime, so a wrong answer cannot pin an entry.
	MaxTTL = 30 * 24 * time.Hour
	// DefaultNegativeTTL is how long a token nobody knows stays unknown
	// before the Book asks Redis again.
	DefaultNegativeTTL = 2 * time.Second
	// DefaultRedisTimeout bounds one Redis call on the request path. It is
	// generous because a replica asks Redis once per token it did not
	// learn itself, and an answer that comes late still beats charging
	// the token's calls to the wrong app.
	DefaultRedisTimeout = 500 * time.Millisecond
	// errorTTL is how long a token stays unknown after Redis failed to
	// answer for it.
	errorTTL = 250 * time.Millisecond
	// DefaultMaxTokens bounds the local cache; past it, expired entries go
	// first, then arbitrary ones (they are re-read from Redis when needed).
	DefaultMaxTokens = 1 << 20
	// MinKeyLen is the shortest HMAC key WithRedis accepts.
	MinKeyLen = 16
)

// Option configures a Book.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	rdb          redis.UniversalClient
	key          []byte
	prefix       string
	negativeTTL  time.Duration
	redisTimeout time.Duration
	maxTokens    int
	meter        metric.MeterProvider
	now          func() time.Time
	errs         []error
}

func defaultConfig() config {
	return config{
		prefix:       "throttle",
		negativeTTL:  DefaultNegativeTTL,
		redisTimeout: DefaultRedisTimeout,
		maxTokens:    DefaultMaxTokens,
		now:          time.Now,
	}
}

// WithRedis shares what the Book learns with every replica through rdb.
// key is the HMAC key tokens are hashed with before they name a Redis key:
// every replica must use the same key, at least MinKeyLen bytes of secret
// randomness (keep it with the apps' secrets). Without WithRedis, each
// replica knows only the exchanges it saw itself.
func WithRedis(rdb redis.UniversalClient, key []byte) Option {
	return optionFunc(func(c *config) {
		if rdb == nil {
			c.errs = append(c.errs, errors.New("apps: WithRedis: client must not be nil"))
		}
		if len(key) < MinKeyLen {
			c.errs = append(c.errs, fmt.Errorf("apps: WithRedis: key must be at least %d bytes, got %d", MinKeyLen, len(key)))
		}
		c.rdb, c.key = rdb, append([]byte(nil), key...)
	})
}

// WithPrefix sets the prefix of the Book's Redis keys (default "throttle",
// the Transport's): keys are "<prefix>:app:<hash>".
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) {
		if p == "" {
			c.errs = append(c.errs, errors.New("apps: WithPrefix: prefix must not be empty"))
		}
		c.prefix = p
	})
}

// WithNegativeTTL sets how long an unknown token is remembered as unknown
// (default 2 s): the longest a replica may charge a token another replica
// just learned to the default app, and the least time between two Redis
// calls for one unknown token.
func WithNegativeTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithNegativeTTL: must be positive, got %v", d))
		}
		c.negativeTTL = d
	})
}

// WithRedisTimeout bounds each Redis call (default 500 ms); a lookup that
// times out leaves the request untagged, and its token unknown for the
// negative TTL.
func WithRedisTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithRedisTimeout: must be positive, got %v", d))
		}
		c.redisTimeout = d
	})
}

// WithMaxTokens bounds how many tokens the local cache holds (default
// 1,048,576, about 60 MB at most).
func WithMaxTokens(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithMaxTokens: must be positive, got %d", n))
		}
		c.maxTokens = n
	})
}

// WithMeterProvider records the Book's counters there (default: the global
// provider). Counters carry the provider name, never a token or an app.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// WithClock sets the clock entries expire by (default time.Now), for tests.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// Stats counts what a Book did since it was made.
type Stats struct {
	Learned      int64 // tokens learned from exchanges or Learn
	LocalHits    int64 // lookups answered from memory (known or known unknown)
	RedisLookups int64 // lookups that asked Redis
	RedisFound   int64 // ... and found the token there
	RedisErrors  int64 // Redis calls that failed or timed out
	Unknown      int64 // requests whose token nobody knew
	Heard        int64 // tokens other replicas announced as they learned them
	Tokens       int   // entries in the local cache, unknown ones included
}

// Book learns and remembers which app each access token belongs to. It is
// safe for concurrent use; make one per process with New and give it to the
// Transport with throttle.WithApps.
type Book struct {
	cfg    config
	hashes sync.Pool // *hasher
	shards [nShards]shard
	epoch  time.Time // entry expiries count ticks from here

	flightMu sync.Mutex
	flights  map[tokenHash]*flight // Redis lookups in progress

	idMu  sync.RWMutex
	ids   []App // by index; ids[0] is "unknown"
	idIdx map[App]uint32

	learned, localHits, redisLookups, redisFound, redisErrors, unknown, heardCount atomic.Int64

	stop      chan struct{} // closes the announcement listener
	closeOnce sync.Once

	unknownCounter metric.Int64Counter
	learnedCounter metric.Int64Counter
}

// New returns a Book. It fails, naming the option, when an option is invalid.
func New(opts ...Option) (*Book, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.key == nil {
		// Local only: the hash never leaves the process, any key will do.
		c.key = make([]byte, 32)
		_, _ = rand.Read(c.key)
	}
	b := &Book{
		cfg:     c,
		flights: make(map[tokenHash]*flight),
		epoch:   c.now().Add(-time.Second),
		ids:     []App{{}},
		idIdx:   map[App]uint32{{}: 0},
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
		metric.WithDescription("Requests whose access token no replica had learned: charged to the preset's default app or shared scope."))
	b.learnedCounter, _ = m.Int64Counter("throttle.apps.learned", metric.WithUnit("{token}"),
		metric.WithDescription("Access tokens learned from token exchanges."))
	if c.rdb != nil {
		b.stop = make(chan struct{})
		b.subscribe(b.stop)
	}
	return b, nil
}

// Close stops listening to the other replicas' announcements (a Book on
// Redis listens from New on). Lookups and learning keep working, through
// Redis calls.
func (b *Book) Close() error {
	b.closeOnce.Do(func() {
		if b.stop != nil {
			close(b.stop)
		}
	})
	return nil
}

// MustNew is New that panics on an invalid option.
func MustNew(opts ...Option) *Book {
	b, err := New(opts...)
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
		Heard: b.heardCount.Load(),
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
// (throttle.WithApp), or that carries no token, is returned as it is; so is
// one whose token is unknown, which is counted as such.
func (b *Book) Resolve(req *http.Request, provider string) *http.Request {
	ctx := req.Context()
	if _, ok := FromContext(ctx); ok {
		return req
	}
	tok := Token(req)
	if tok == "" || req.URL.Path == dingtalkRobot {
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
// this replica has not seen the token yet.
func (b *Book) Lookup(ctx context.Context, token string) (App, bool) {
	h := b.hash(token)
	now := b.tick(b.cfg.now())
	if e, ok := b.get(h, now); ok {
		b.localHits.Add(1)
		if e.app == 0 {
			return App{}, false
		}
		return b.app(e.app), true
	}
	if b.cfg.rdb == nil {
		b.put(h, entry{exp: now + ticks(b.cfg.negativeTTL)}, now)
		return App{}, false
	}
	return b.fetchOnce(ctx, h)
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

	app, ttl, ok, err := b.fetch(ctx, h)
	now := b.tick(b.cfg.now())
	switch {
	case ok:
		b.put(h, entry{app: b.intern(app), exp: now + ticks(ttl)}, now)
	case err != nil:
		// Redis did not answer in time: ask again soon, since a slow
		// moment should not send the token's calls to the wrong app for
		// long, but not on every request, or an outage would hold each
		// one for the timeout.
		b.put(h, entry{exp: now + ticks(errorTTL)}, now)
	default:
		b.put(h, entry{exp: now + ticks(b.cfg.negativeTTL)}, now)
	}
	f.app, f.ok = app, ok
	b.flightMu.Lock()
	delete(b.flights, h)
	b.flightMu.Unlock()
	close(f.done)
	return app, ok
}

// Learn records that token belongs to app for ttl (DefaultTTL when zero),
// here and, with WithRedis, for every replica. Exchanges seen by Observe are
// learned this way; call it yourself for tokens fetched elsewhere.
func (b *Book) Learn(ctx context.Context, token string, app App, ttl time.Duration) error {
	if token == "" || app.ID == "" {
		return errors.New("apps: Learn: token and app.ID must not be empty")
	}
	switch {
	case ttl <= 0:
		ttl = DefaultTTL
	case ttl > MaxTTL:
		ttl = MaxTTL
	}
	app.Learned = true
	h := b.hash(token)
	now := b.tick(b.cfg.now())
	b.put(h, entry{app: b.intern(app), exp: now + ticks(ttl)}, now)
	b.learned.Add(1)
	b.learnedCounter.Add(ctx, 1, b.providerAttr(app.Provider))
	if b.cfg.rdb == nil {
		return nil
	}
	return b.store(ctx, h, app, ttl)
}

// intern returns the index of app in b.ids, adding it when new: entries
// hold 4 bytes instead of three strings.
func (b *Book) intern(app App) uint32 {
	app.Learned = true
	b.idMu.RLock()
	i, ok := b.idIdx[app]
	b.idMu.RUnlock()
	if ok {
		return i
	}
	b.idMu.Lock()
	defer b.idMu.Unlock()
	if i, ok := b.idIdx[app]; ok {
		return i
	}
	i = uint32(len(b.ids))
	b.ids = append(b.ids, app)
	b.idIdx[app] = i
	return i
}

func (b *Book) app(i uint32) App {
	b.idMu.RLock()
	defer b.idMu.RUnlock()
	return b.ids[i]
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
