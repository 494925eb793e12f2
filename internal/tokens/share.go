package tokens

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/providers"
)

// Bounds of what an exchange buffers: its request and answer are a few
// hundred bytes; anything longer is not a token call and is sent as it came.
const (
	maxRequestBody = 16 << 10
	maxAnswer      = 16 << 10
)

// Sharer shares token exchanges through Redis; see the package doc. Build
// it with New and wrap the transport the exchanges go through with Wrap.
type Sharer struct {
	rdb     redis.UniversalClient
	prefix  string
	margin  time.Duration
	lease   time.Duration
	poll    time.Duration
	maxWait time.Duration // WithMaxWait; 0: none
	now     func() time.Time

	healGap     time.Duration // WithHealLimits
	healsPerDay int

	observe func(provider, result string) // WithObserver; nil: none

	mu     sync.Mutex
	handed map[string][]handed   // tokens this replica fetched or handed out: each answer keeping one
	dead   map[string]*deadToken // tokens of handed the provider refused since (replace.go)
	nHand  atomic.Int32          // len(handed) + len(dead), read without the lock

	fetched, shared, waited, healed, capped, unshared, replaced atomic.Int64

	// bg counts the work a Sharer goes on with after its caller has its
	// answer (a rotating exchange's fetch its caller gave up on, the write
	// of an answer not kept): each is bounded in time, and ends at once
	// on Close, which waits for it (as tests do).
	bg sync.WaitGroup
	// bgMu orders bg.Add against Close: an Add once Close has begun its
	// Wait would be a misuse of the WaitGroup, and work started then would
	// outlive Close. closed is set under it.
	bgMu   sync.Mutex
	closed bool
	// closing is cancelled by Close: background work selects on it, and
	// the contexts of detached fetches are cancelled with it.
	closing   context.Context
	stopClose context.CancelFunc
}

// New returns a Sharer on rdb.
func New(rdb redis.UniversalClient, opts ...Option) (*Sharer, error) {
	if rdb == nil {
		return nil, errors.New("tokens: New: Redis client must not be nil")
	}
	c := config{prefix: "throttle", margin: DefaultMargin, lease: 3 * time.Second, poll: 20 * time.Millisecond, now: time.Now,
		gap: 30 * time.Second, perDay: 20}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	closing, stop := context.WithCancel(context.Background())
	return &Sharer{rdb: rdb, prefix: c.prefix, margin: c.margin, lease: c.lease, poll: c.poll, maxWait: c.wait, now: c.now,
		healGap: c.gap, healsPerDay: c.perDay, observe: c.obs, handed: map[string][]handed{}, dead: map[string]*deadToken{},
		closing: closing, stopClose: stop}, nil
}

// Close stops the Sharer's background work and waits for it until ctx is
// done: the later write of a rotating answer Redis did not take
// (converge) gives up at once, and the fetches that went on for the fleet
// after their callers gave up (detach) have their contexts cancelled, so
// that their sends end and their leases are let go for another replica.
// Nothing outlives Close then (a leak check after it finds nothing of the
// Sharer's), unless ctx ends first: Close returns ctx.Err(), and the work
// left, and Close's wait for it, end on their own within the work's
// bounds (each Redis call 250 ms, cancelled sends at once).
//
// Close does not close the Redis client, which is the caller's. Calling it
// again is harmless (it waits again). An exchange made after Close is
// still shared through Redis while the client answers, and sent as it came
// when it does not, but starts no background work: a rotating fetch runs
// on its caller's context (a caller that gives up cancels it), and its
// answer, when Redis did not take it, is not written later; a service
// that closes its Transport sends nothing more through it.
func (s *Sharer) Close(ctx context.Context) error {
	s.bgMu.Lock()
	s.closed = true
	s.bgMu.Unlock()
	s.stopClose()
	done := make(chan struct{})
	go func() {
		s.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startBackground counts one piece of background work in bg, reporting
// false, and counting nothing, once Close has begun: the caller then does
// without it.
func (s *Sharer) startBackground() bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed {
		return false
	}
	s.bg.Add(1)
	return true
}

// Wrap returns a RoundTripper that sends through base, answering token
// exchanges from Redis when another replica fetched them, and watching
// the answers to tokens it handed out for the provider's invalid-token
// codes. Other requests pass at the cost of a path comparison while no
// token was handed out, and of a map lookup after (a form-encoded body
// with no token in its header or query is peeked, up to 4 KiB, for an
// access_token field).
func (s *Sharer) Wrap(base http.RoundTripper) http.RoundTripper {
	return &roundTripper{s: s, base: base}
}

type roundTripper struct {
	s    *Sharer
	base http.RoundTripper
}

func (r *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if ex := exchangeFor(req.Method, apipath.Sent(req.URL)); ex != nil {
		return r.s.exchange(r.base, ex, req)
	}
	return r.s.send(r.base, req)
}

// send sends req, watching the token it carries when this replica has
// handed tokens out (exchanges too: a WeCom suite's token travels in its
// get_corp_token exchanges).
func (s *Sharer) send(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	if s.nHand.Load() == 0 {
		return base.RoundTrip(req)
	}
	return s.watch(base, req)
}

// prepared is an exchange's request as the Sharer reads it: the request to
// send (req, or a copy whose body replays what was read), and the keys of
// the credential it presents.
type prepared struct {
	sent  *http.Request
	body  []byte // the request's whole body, when it has one
	k     *keys
	key   string // the Redis key of the kept answer
	force bool   // a forced refresh: never answered from Redis
}

// prepare reads an exchange; ok is false when it presents no credential or
// its body was not read whole: p.sent is then to be sent as it came.
func (s *Sharer) prepare(req *http.Request, ex *exchange) (p prepared, ok bool) {
	p.sent = req
	var raw []byte
	if req.Body != nil && req.Body != http.NoBody {
		// RoundTrip must not modify req: peek at a copy, whose body
		// replays what was read.
		p.sent = req.Clone(req.Context())
		var complete bool
		raw, complete = providers.PeekRequestBody(p.sent, maxRequestBody)
		if !complete {
			return p, false
		}
		p.body = raw
	}
	path := apipath.Sent(req.URL)
	cred, force := ex.Credential(req.Method, path, req.URL.Query(), exchanges.ParseRequest(raw))
	if cred == nil {
		return p, false
	}
	k, err := derive(ex.Provider, path, cred)
	if err != nil {
		return p, false
	}
	p.k, p.key, p.force = k, s.prefix+":token:"+k.name, force
	return p, true
}

// Stored answers a token exchange of provider (the profile the request
// matched) from the answer kept in Redis, waiting for an exchange of the
// same credential in flight on any replica, bounded by req's context. The
// Transport calls it before its limiter, so that only exchanges sent to the
// provider are charged to the exchange's rules.
//
// resp is nil when no answer is kept, the request is not an exchange of
// provider, or Redis fails: sent (req, or a copy whose body replays what
// was read) is then to be sent on. err is the context's when it ended
// while waiting, or a *WaitError once the wait passed WithMaxWait; req's
// body is then closed.
func (s *Sharer) Stored(req *http.Request, provider string) (resp *http.Response, sent *http.Request, err error) {
	ex := exchangeFor(req.Method, apipath.Sent(req.URL))
	if ex == nil || ex.Provider != provider {
		return nil, req, nil
	}
	p, ok := s.prepare(req, ex)
	if !ok || p.force {
		return nil, p.sent, nil
	}
	ctx := req.Context()
	var w waiter
	defer w.stop()
	for {
		kv, held, err := s.peek(ctx, p.key)
		if err != nil {
			return nil, p.sent, nil // the base's exchange decides, as without Stored
		}
		if kv.v != nil {
			if resp, ok := s.answer(req, ex, p.k, p.key, kv); ok {
				s.count(ex.Provider, Shared)
				if p.sent != req {
					// answer closed the caller's body: what is handed on
					// (to learn from) replays it and closes nothing, so
					// that the body is closed once.
					p.sent.Body = io.NopCloser(bytes.NewReader(p.body))
				}
				return resp, p.sent, nil
			}
		}
		if !held {
			if w.timer != nil {
				// It waited here: the exchange sent on does not count
				// another wait, and any later wait counts from this one's
				// start (or the budget's, when the context had one).
				ctx := context.WithValue(BudgetFrom(p.sent.Context(), w.since), waitedKey{}, true)
				return nil, p.sent.WithContext(ctx), nil
			}
			return nil, p.sent, nil // nobody fetching: this one is sent
		}
		if err := s.pollWait(ctx, &w, ex.Provider); err != nil {
			closeBody(p.sent)
			return nil, p.sent, err
		}
	}
}

// peekTimeout bounds each of Stored's Redis calls: a Redis that does not
// answer delays an exchange by no more before it goes on to the limiter
// (whose own calls are bounded alike).
const peekTimeout = 250 * time.Millisecond

// peek reads the answer kept at key and, when none is, whether an
// exchange of it is in flight (its lease held): one round trip when an
// answer is kept, the common case, two otherwise.
func (s *Sharer) peek(ctx context.Context, key string) (kv keptValue, held bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	kv, err = s.get(ctx, key)
	switch {
	case err == nil:
		return kv, false, nil
	case !errors.Is(err, redis.Nil):
		return keptValue{}, false, err
	}
	held, err = s.leaseHeld(ctx, key+":lock")
	return keptValue{}, held, err
}

// exchange answers one token exchange: from Redis, by fetching it for the
// fleet, or, when the request presents no credential or Redis fails, by
// sending it as it came. A forced refresh asks the provider for a new
// token: never answered from Redis, its answer replaces the one kept. It
// takes the lease as a fetch does, after the fetch in flight if there is
// one: that fetch, answered before the refresh but kept after it, would
// put back the token the refresh invalidated, and the fleet would share a
// dead token until a heal.
func (s *Sharer) exchange(base http.RoundTripper, ex *exchange, req *http.Request) (*http.Response, error) {
	p, ok := s.prepare(req, ex)
	if !ok {
		return s.send(base, p.sent)
	}
	sent, k, key := p.sent, p.k, p.key
	ctx := req.Context()
	var w waiter
	defer w.stop()
	looked := false // at the lease held by another replica
	for {
		if !p.force {
			resp, err := s.kept(ctx, req, ex, k, key)
			if resp != nil {
				unsent(ctx)
				return resp, nil
			}
			if err != nil {
				return s.unshare(base, sent, ctx, ex, k, key)
			}
		}
		lock := nonce()
		got, unkept, err := s.take(ctx, key, lock, p.force)
		if err != nil {
			switch s.ownAfterAll(ctx, key, lock) {
			case leaseMine:
				// Redis took the lease though its reply did not come in
				// time: this exchange holds it, and fetches for the fleet.
				got, err = true, nil
			case leaseOthers:
				// Another replica is fetching: waited for below, as a take
				// answered "held" is (sent alone, a rotating exchange
				// would retire the token that fetch brings).
				err = nil
			}
		}
		if err != nil || unkept {
			return s.unshare(base, sent, ctx, ex, k, key)
		}
		if got {
			// The answer may have been kept between the read above and
			// the lease: read again before fetching.
			if !p.force {
				if resp, _ := s.kept(ctx, req, ex, k, key); resp != nil {
					s.release(ctx, key+":lock", lock)
					unsent(ctx)
					return resp, nil
				}
			}
			return s.fetch(base, sent, ex, k, key, lock)
		}
		// Another replica is fetching: its answer comes within its lease,
		// or the lease ends and this one takes over. A lease none of them
		// could have set is deleted, and this one takes it at once (looked
		// at once per exchange: a wait is bounded by maxWait anyway).
		if !looked {
			looked = true
			lctx, cancel := context.WithTimeout(ctx, peekTimeout)
			held, err := s.leaseHeld(lctx, key+":lock")
			cancel()
			if err == nil && !held {
				continue
			}
		}
		if err := s.pollWait(ctx, &w, ex.Provider); err != nil {
			closeBody(sent)
			unsent(ctx)
			return nil, err
		}
	}
}

// kept answers req from the answer kept in Redis, counted as Shared, or
// returns nil: none kept (or none that opens and passes the checks), or
// err when Redis failed.
func (s *Sharer) kept(ctx context.Context, req *http.Request, ex *exchange, k *keys, key string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	kv, err := s.get(ctx, key)
	switch {
	case err == nil:
		if resp, ok := s.answer(req, ex, k, key, kv); ok {
			s.count(ex.Provider, Shared)
			return resp, nil
		}
		return nil, nil
	case errors.Is(err, redis.Nil):
		return nil, nil
	}
	return nil, err
}

// keptValue is a kept answer as read: its sealed value, and its time to
// live on Redis's clock.
type keptValue struct {
	v   []byte
	ttl time.Duration // -1: none known
}

// get reads the kept answer at key and its time to live, in one round
// trip; redis.Nil when there is none.
func (s *Sharer) get(ctx context.Context, key string) (keptValue, error) {
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	// The pipeline's error is its first command's that failed: each
	// command's own is what counts. A PTTL refused (a Redis user allowed
	// GET and SET only, which sharing needed before) leaves the bound
	// unknown, and sharing on.
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get, ttl = p.Get(ctx, key), p.PTTL(ctx, key)
		return nil
	})
	v, err := get.Bytes()
	if err != nil {
		return keptValue{}, err
	}
	d, err := ttl.Result()
	if err != nil || d < 0 {
		d = -1
	}
	return keptValue{v: v, ttl: d}, nil
}

// keep writes the answer v at key for d, bounded as peek is.
func (s *Sharer) keep(ctx context.Context, key string, v []byte, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	return s.rdb.Set(ctx, key, v, d).Err()
}

// unshare sends an exchange as it came, when Redis fails (or ctx ended
// during a Redis call, which the send then reports). A rotating exchange
// is sent detached from its caller, as the fleet's fetch is (fetch), and
// its answer written for the fleet once Redis answers (rememberUnkept).
func (s *Sharer) unshare(base http.RoundTripper, sent *http.Request, ctx context.Context, ex *exchange, k *keys, key string) (*http.Response, error) {
	if ctx.Err() == nil {
		s.count(ex.Provider, Unshared)
	}
	alone := func(sent *http.Request) (*http.Response, error) {
		resp, err := s.send(base, sent)
		if err == nil {
			s.rememberUnkept(resp, sent, ex, k, key, s.now())
		}
		return resp, err
	}
	if ctx.Err() != nil || !exchanges.Rotates(sent.Method, apipath.Sent(sent.URL)) {
		return alone(sent)
	}
	return s.detach(sent, alone)
}

// fetch sends the exchange and keeps its answer when it passes the checks;
// lock, when not empty, is the lease released afterwards.
//
// A rotating exchange (WeChat's GET /cgi-bin/token) is fetched for the
// fleet whatever its caller does (detach): once the provider has the
// request it may have issued a new token and retired the one before, so an
// answer dropped with a caller that gave up left the fleet no token that
// lives, and its lease, let go while the fetch was still in flight, let
// the next exchange fetch and rotate again. One whose caller gave up
// before anything was sent sends nothing.
func (s *Sharer) fetch(base http.RoundTripper, sent *http.Request, ex *exchange, k *keys, key, lock string) (*http.Response, error) {
	if !exchanges.Rotates(sent.Method, apipath.Sent(sent.URL)) {
		return s.fetchHeld(base, sent, ex, k, key, lock)
	}
	if ctx := sent.Context(); ctx.Err() != nil {
		if lock != "" {
			s.release(ctx, key+":lock", lock)
		}
		closeBody(sent)
		unsent(ctx)
		return nil, ctx.Err()
	}
	return s.detach(sent, func(sent *http.Request) (*http.Response, error) {
		return s.fetchHeld(base, sent, ex, k, key, lock)
	})
}

// fetchHeld is fetch under the lease lock, when not empty.
func (s *Sharer) fetchHeld(base http.RoundTripper, sent *http.Request, ex *exchange, k *keys, key, lock string) (*http.Response, error) {
	if lock != "" {
		// The lease is held while the provider answers, however slowly
		// (the others would fetch too), and let go once the answer is
		// kept or refused.
		defer s.holdLease(sent.Context(), key+":lock", lock)()
	}
	resp, err := s.send(base, sent)
	// Redis writes outlive a caller that gives up (the answer is the
	// fleet's), and each is bounded from when it starts, as every Redis
	// call of an exchange is (peekTimeout): a provider slower than a
	// bound must not cost the fleet its answer, nor a stalled Redis hold
	// the caller that has it.
	ctx := context.WithoutCancel(sent.Context())
	if err != nil {
		return resp, err
	}
	if resp.StatusCode != http.StatusOK {
		s.markUnkept(ctx, sent, key, lock)
		return resp, nil
	}
	fetched := s.now()
	raw, toks, h, ok := s.readAnswer(resp, sent, ex, k, key, fetched)
	if !ok {
		s.markUnkept(ctx, sent, key, lock)
		return resp, nil
	}
	keep := h.until.Sub(fetched)
	v, err := k.seal(key, toks[0].Value, fetched, raw)
	if err != nil {
		return resp, nil
	}
	if lock != "" && !s.stillHeld(ctx, key+":lock", lock) {
		// The lease lapsed during the fetch (Redis stalled past its
		// renewals, or the fetch outlasted maxLeaseHold), and another
		// replica may have fetched since, a forced refresh that
		// invalidated this answer's token among them: keeping this
		// answer would hand the fleet a dead token.
		s.count(ex.Provider, Unshared)
		s.rememberAnswer(toks, h)
		return resp, nil
	}
	if err := s.keep(ctx, key, v, keep); err != nil {
		s.count(ex.Provider, Unshared)
		s.rememberAnswer(toks, h)
		if exchanges.Rotates(sent.Method, apipath.Sent(sent.URL)) {
			// Its token retired the one before: the fleet is to have it
			// once Redis answers, as an answer sent alone (converge).
			s.converge(k, key, toks[0].Value, fetched, v, h.until)
		}
		return resp, nil
	}
	s.count(ex.Provider, Fetched)
	s.rememberAnswer(toks, h)
	return resp, nil
}

// detach runs do, the send of a rotating exchange and what follows it, on
// req under a context of its own: req's values without its cancellation,
// bounded by maxLeaseHold (as long as a fetch holds its lease). A caller
// whose context ends first is answered at once with its context's error,
// and do goes on for the fleet: the provider may have issued a new token
// already. The body of an answer nobody took is closed; the context of one
// taken ends when its body is closed (it is read after detach returns).
//
// Close cancels the context while do runs (its send ends, its lease is let
// go); once do has returned, Close no longer does: the answer is its
// caller's, whose body it leaves alone. After Close, do runs on req as it
// came, nothing detached.
func (s *Sharer) detach(req *http.Request, do func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if !s.startBackground() {
		return do(req)
	}
	ctx := req.Context()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxLeaseHold)
	// Cancelled by Close, not by the caller: the caller's cancellation is
	// what the context is detached from.
	unhook := context.AfterFunc(s.closing, cancel)
	type result struct {
		resp *http.Response
		err  error
	}
	out, gone := make(chan result), make(chan struct{})
	go func() {
		defer s.bg.Done()
		resp, err := do(req.WithContext(dctx))
		unhook()
		if resp == nil {
			cancel()
		} else {
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		}
		select {
		case out <- result{resp, err}:
		case <-gone:
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()
	select {
	case r := <-out:
		return r.resp, r.err
	case <-ctx.Done():
		close(gone)
		return nil, ctx.Err()
	}
}

// cancelOnClose ends a detached exchange's context once its answer's body
// is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// readAnswer reads the tokens of an exchange's answer, fetched at fetched,
// and what the fleet keeps and watches of it (h, with the hash of the
// first token, which heads the value kept); ok is false when it holds none
// or too little is left of it (raw is then what was read, if any). An answer stated with no more than
// the margin (a repeat of a token near its end: WeChat's stable_token,
// WeCom's gettoken) is not kept: each exchange then goes to the provider,
// which answers it truly or with a new token. A margin shrunk to a
// quarter of the stated lifetime kept a repeat of 900 s to 225 s and told
// SDKs less than the provider ever does (silenceper's stable_token cache
// then failed).
func (s *Sharer) readAnswer(resp *http.Response, sent *http.Request, ex *exchange, k *keys, key string, fetched time.Time) (raw []byte, toks []exchanges.Token, h handed, ok bool) {
	raw, err := providers.PeekBody(resp, maxAnswer)
	if err != nil || len(raw) >= maxAnswer {
		return nil, nil, handed{}, false
	}
	path := apipath.Sent(sent.URL)
	toks, life, ok := check(ex, path, raw)
	keep := time.Duration(life)*time.Second - s.margin
	if !ok || keep < time.Second {
		return raw, nil, handed{}, false
	}
	if _, ok := countDown(raw, life); !ok {
		// An answer no other replica could be given (answer counts it
		// down): kept, every reader would miss it and fetch again.
		return raw, nil, handed{}, false
	}
	return raw, toks, handed{provider: ex.Provider, key: key, tag: k.tagOf(toks[0].Value), until: fetched.Add(keep), ex: ex, path: path, k: k}, true
}

// rememberUnkept remembers the tokens of an exchange's answer sent alone
// while Redis failed, as fetch remembers one it kept or could not keep:
// the next fetch of its credential by any replica invalidates it (WeChat's
// 40001), and only a remembered token is healed and replaced by the
// fleet's on the requests its SDK goes on sending with it, for as long as
// its own cache holds it (up to about 95 minutes). A rotating exchange's
// answer is written for the fleet too, once Redis answers (converge): its
// token retired the one kept.
func (s *Sharer) rememberUnkept(resp *http.Response, sent *http.Request, ex *exchange, k *keys, key string, fetched time.Time) {
	if resp.StatusCode != http.StatusOK {
		return
	}
	raw, toks, h, ok := s.readAnswer(resp, sent, ex, k, key, fetched)
	if !ok {
		return
	}
	s.rememberAnswer(toks, h)
	if exchanges.Rotates(sent.Method, apipath.Sent(sent.URL)) {
		if v, err := k.seal(key, toks[0].Value, fetched, raw); err == nil {
			s.converge(k, key, toks[0].Value, fetched, v, h.until)
		}
	}
}

// answer builds the response to an exchange from the value kept, with its
// lifetime counted down; ok is false when the value does not open, fails
// the checks, or has less than the margin left.
func (s *Sharer) answer(req *http.Request, ex *exchange, k *keys, key string, kv keptValue) (*http.Response, bool) {
	fetched, raw, err := k.open(key, kv.v)
	if err != nil {
		return nil, false
	}
	path := apipath.Sent(req.URL)
	toks, life, ok := check(ex, path, raw)
	if !ok {
		return nil, false
	}
	// The age is counted on this replica's clock from the fetcher's: a
	// clock behind the fetcher's reads as no age at all (it would make the
	// answer look younger than fetched and refused, and a fetch for WeChat
	// invalidates the fleet's token), one ahead as older. The key's own
	// expiry in Redis, a margin before the token's end, bounds both.
	age := max(0, s.now().Sub(fetched))
	left := life - int64(age/time.Second)
	if kv.ttl >= 0 {
		// The key expires the margin before the token, on Redis's clock:
		// a reader whose clock is behind the fetcher's, which reads the
		// answer as younger than it is, still tells no more than is left
		// (an hour behind, it told an SDK 4,400 s of a token with 800 s
		// left). A replica of a release with a shorter margin wrote a
		// longer expiry; the reader's clock then bounds it.
		// Rounded up, as the age is rounded down.
		left = min(left, int64((kv.ttl+s.margin+time.Second-1)/time.Second))
	}
	if time.Duration(left)*time.Second < s.margin || left < 1 {
		return nil, false
	}
	out, ok := countDown(raw, left)
	if !ok {
		return nil, false
	}
	s.rememberAnswer(toks, handed{provider: ex.Provider, key: key, tag: k.tagOf(toks[0].Value), until: fetched.Add(time.Duration(life)*time.Second - s.margin),
		ex: ex, path: path, k: k})
	closeBody(req)
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json; charset=utf-8"}},
		Body:          io.NopCloser(bytes.NewReader(out)),
		ContentLength: int64(len(out)),
		Request:       req,
	}, true
}

// DefaultMargin is how long before its end a kept token stops being
// handed out, unless WithMargin says otherwise. SDKs cache a token for
// the lifetime they are told less a margin of their own, up to 25 minutes
// (silenceper/wechat subtracts 1,500 s for /cgi-bin/token and WeCom's
// gettoken): told less than that, the SDK caches the token for no time
// or a negative one, and fails every call (its Redis cache refuses the
// expiry) or exchanges on every call. Where an SDK subtracts that much,
// the provider never tells less: WeChat's /cgi-bin/token and WeCom's
// gettoken answer a whole lifetime, Feishu a new token once under 30
// minutes remain (WeChat's stable_token counts down to 5 minutes, and
// silenceper subtracts 5 minutes for it). With 5 minutes, every
// silenceper replica of a fleet failed for the last 20 minutes of each
// token.
const DefaultMargin = 30 * time.Minute

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
