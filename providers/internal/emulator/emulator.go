package emulator

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultTokenTTL is the lifetime of an access token when Config leaves it
// zero: the 7200 s the providers document.
const DefaultTokenTTL = 7200 * time.Second

// Config configures a Core. The zero value of each field takes its default.
type Config struct {
	// Clock is the source of time (default time.Now).
	Clock func() time.Time
	// TimeScale speeds up emulated time; zero or less means 1.
	TimeScale float64
	// TokenTTL is how long an issued token lives in emulated time
	// (default DefaultTokenTTL).
	TokenTTL time.Duration
	// TokenName spells the token issued as the seq-th one (from 1) for
	// owner; it must give distinct tokens.
	TokenName func(seq int, owner string) string
}

// Counters sum up the answers given so far, by the code each one carried.
type Counters struct {
	Total  int
	OK     int         // code 0
	ByCode map[int]int // every non-zero code
}

// Fault is an injected answer: it is written as it is and counts against
// no limit.
type Fault struct {
	Status int
	Header http.Header // nil for none
	Body   string
}

// Core is the state every emulator keeps besides its own counting; R is
// its request record. Methods whose names end in Locked must be called
// between Lock and Unlock; the others take the lock themselves.
type Core[R any] struct {
	mu     sync.Mutex
	clock  func() time.Time
	origin time.Time
	scale  float64
	ttl    time.Duration
	name   func(seq int, owner string) string

	seq      int
	tokens   map[string]token
	issued   map[string]issued // the token each exchange key last got (ReuseLocked)
	revoked  map[string]bool   // tokens Revoke invalidated
	faults   Faults[Fault]
	requests []R
	counters Counters
}

type token struct {
	owner   string
	expires time.Time // emulated
}

// issued is the token an exchange key last got.
type issued struct {
	tok     string
	expires time.Time // emulated
}

// New returns a Core whose emulated time starts at cfg.Clock().
func New[R any](cfg Config) *Core[R] {
	c := &Core[R]{
		clock:    cfg.Clock,
		scale:    cfg.TimeScale,
		ttl:      cfg.TokenTTL,
		name:     cfg.TokenName,
		tokens:   map[string]token{},
		counters: Counters{ByCode: map[int]int{}},
	}
	if c.clock == nil {
		c.clock = time.Now
	}
	if c.scale <= 0 {
		c.scale = 1
	}
	if c.ttl <= 0 {
		c.ttl = DefaultTokenTTL
	}
	c.origin = c.clock()
	return c
}

// Lock takes the emulator's lock, which also guards the emulator's own
// counting state.
func (c *Core[R]) Lock() { c.mu.Lock() }

// Unlock releases the lock.
func (c *Core[R]) Unlock() { c.mu.Unlock() }

// Now is the emulated time.
func (c *Core[R]) Now() time.Time {
	_, emu := c.Times()
	return emu
}

// Times reads the clock once and returns it (wall) and the emulated time
// at that instant: origin + (wall - origin) × TimeScale.
func (c *Core[R]) Times() (wall, emu time.Time) {
	wall = c.clock()
	if c.scale == 1 {
		return wall, wall
	}
	return wall, c.origin.Add(time.Duration(float64(wall.Sub(c.origin)) * c.scale))
}

// TokenTTL is the lifetime of the tokens issued.
func (c *Core[R]) TokenTTL() time.Duration { return c.ttl }

// Token issues a token for owner at the current emulated time.
func (c *Core[R]) Token(owner string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, emu := c.Times()
	return c.IssueLocked(owner, emu)
}

// IssueLocked issues a token for owner that expires TokenTTL after emu.
func (c *Core[R]) IssueLocked(owner string, emu time.Time) string {
	c.seq++
	t := c.name(c.seq, owner)
	c.tokens[t] = token{owner: owner, expires: emu.Add(c.ttl)}
	return t
}

// ReuseLocked answers a token exchange of key (what the exchange presents:
// an app and its secret, a suite, an authorised company) whose tokens
// belong to owner, as the providers that keep a token do (PROVIDERS.md,
// "What a second exchange does"): the token key last got while more than
// renewBelow of its lifetime remains, a new one (the old one still valid)
// otherwise. It returns the token and its lifetime left in seconds.
func (c *Core[R]) ReuseLocked(key, owner string, emu time.Time, renewBelow time.Duration) (string, int) {
	if t, ok := c.issued[key]; ok {
		if left := t.expires.Sub(emu); left > renewBelow {
			return t.tok, int(left / time.Second)
		}
	}
	tok := c.IssueLocked(owner, emu)
	if c.issued == nil {
		c.issued = map[string]issued{}
	}
	c.issued[key] = issued{tok: tok, expires: emu.Add(c.ttl)}
	return tok, int(c.ttl / time.Second)
}

// Revoke makes tok invalid at once, as a provider does to a token when an
// app's secret is reset: CheckLocked finds it unknown (its owner still
// named), and the next exchange of the key that got it (ReuseLocked)
// issues a new token.
func (c *Core[R]) Revoke(tok string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revoked == nil {
		c.revoked = map[string]bool{}
	}
	c.revoked[tok] = true
	for k, t := range c.issued {
		if t.tok == tok {
			delete(c.issued, k)
		}
	}
}

// TokenState is what CheckLocked found out about a token.
type TokenState int

// Token states.
const (
	TokenValid   TokenState = iota
	TokenMissing            // no token was sent
	TokenUnknown            // never issued
	TokenExpired            // issued, but its lifetime is over at emu
)

// CheckLocked looks tok up at emulated time emu. The owner is known for a
// valid or an expired token.
func (c *Core[R]) CheckLocked(tok string, emu time.Time) (owner string, st TokenState) {
	if tok == "" {
		return "", TokenMissing
	}
	t, ok := c.tokens[tok]
	switch {
	case !ok:
		return "", TokenUnknown
	case c.revoked[tok]:
		return t.owner, TokenUnknown
	case !emu.Before(t.expires):
		return t.owner, TokenExpired
	}
	return t.owner, TokenValid
}

// Inject queues f as the answer to the next n requests that take a fault,
// after the faults queued before.
func (c *Core[R]) Inject(n int, f Fault) {
	c.mu.Lock()
	c.faults.Add(n, f)
	c.mu.Unlock()
}

// NextFaultLocked takes one answer from the fault queue, if any is left.
func (c *Core[R]) NextFaultLocked() (Fault, bool) { return c.faults.Next() }

// RecordLocked appends rec to the record and counts its code.
func (c *Core[R]) RecordLocked(rec R, code int) {
	c.requests = append(c.requests, rec)
	c.counters.Total++
	if code == 0 {
		c.counters.OK++
	} else {
		c.counters.ByCode[code]++
	}
}

// Requests returns a copy of the record of every request so far.
func (c *Core[R]) Requests() []R {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]R(nil), c.requests...)
}

// Counters returns a copy of the counters.
func (c *Core[R]) Counters() Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.counters
	n.ByCode = make(map[int]int, len(c.counters.ByCode))
	for k, v := range c.counters.ByCode {
		n.ByCode[k] = v
	}
	return n
}

// Faults is a queue of injected answers: Add(n, f) makes the next n calls
// of Next return f, after whatever was queued before. It has no lock of its
// own.
type Faults[F any] struct {
	q []batch[F]
}

type batch[F any] struct {
	left int
	f    F
}

// Add queues f for the next n calls of Next; n of 0 or less adds nothing.
func (q *Faults[F]) Add(n int, f F) {
	if n > 0 {
		q.q = append(q.q, batch[F]{left: n, f: f})
	}
}

// Next takes one answer from the queue; false when it is empty.
func (q *Faults[F]) Next() (F, bool) {
	if len(q.q) == 0 {
		var zero F
		return zero, false
	}
	b := &q.q[0]
	f := b.f
	if b.left--; b.left == 0 {
		q.q = q.q[1:]
	}
	return f, true
}

// Delay holds a request for a uniform random duration in [lo, hi] of real
// time (lo when hi <= lo) before the emulator counts it, as the network
// between client and provider does: jitter moves calls across the
// provider's window boundaries. It reports false if the client went away
// meanwhile.
func Delay(r *http.Request, lo, hi time.Duration) bool {
	d := lo
	if hi > lo {
		d += rand.N(hi - lo + 1)
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// Errcode reads the numeric "errcode" member of a JSON body (WeChat's and
// WeCom's shape), or 0.
func Errcode(body string) int {
	var v struct {
		N json.Number `json:"errcode"`
	}
	return number(body, &v, &v.N)
}

// Code reads the numeric "code" member of a JSON body (Feishu's shape), or
// 0.
func Code(body string) int {
	var v struct {
		N json.Number `json:"code"`
	}
	return number(body, &v, &v.N)
}

func number(body string, v any, n *json.Number) int {
	if json.Unmarshal([]byte(body), v) != nil {
		return 0
	}
	i, _ := strconv.Atoi(string(*n))
	return i
}

// ManualClock is a clock a test sets by hand and hands to an emulator as
// its Clock (c.Now). It is safe for concurrent use.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a clock that reads t until it is moved.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{t: t} }

// Now reads the clock.
func (c *ManualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// Add moves the clock by d.
func (c *ManualClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
