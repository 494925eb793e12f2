package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/quotaware/throttle/internal/nilness"
	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/redis/go-redis/v9"
)

// Redis is a Limiter whose state lives in Redis, shared by every replica that
// uses the same client, prefix and keys. Each Reserve takes at most one
// script call; under load, concurrent requests of the same group share one.
type redisLimiter struct {
	client redis.UniversalClient
	prefix string
	keys   keyCache
	lanes  lanes
	// timeout bounds each call to Redis (0: the context alone), so that
	// time a request spends queued behind another call does not count.
	timeout time.Duration
	bound   callBound // the Timeout's deadlines, shared by calls
	// addr names the Redis the client calls, for the errors of failed
	// reserves: an outage's "context deadline exceeded" alone said
	// neither which Redis nor whose deadline.
	addr string
	// report, if set, is told of lost state and corrupt values.
	report func(event)
	// onStale, if set, is told of a penalty not recorded for a reset
	// after its call went out (penalize.lua's -2), before Penalize returns.
	onStale func(group string, p Penalty)
	// onPenalty, if set, is told of every penalty this replica met in
	// Redis: written by it, or refusing one of its reserves.
	onPenalty func(group string, p Penalty)
	// onPublish, if set, is told whether each announcement went out (nil)
	// or why not.
	onPublish func(error)
	// now is this replica's clock (default time.Now); penalty ends are
	// sent relative to it.
	now func() time.Time
	// spawn, if set, runs work no caller waits for (a coalesced call's
	// give-back) so that the owner's Close waits for it; else it runs on
	// a goroutine of its own.
	spawn func(func())

	// epochs is the latest epoch seen per group (see state.lua's epoch).
	epochMu sync.Mutex
	epochs  map[string]epochState
}

// redisOption configures a Redis limiter.
type redisOption interface{ applyRedis(*redisLimiter) }

type redisOptionFunc func(*redisLimiter)

func (f redisOptionFunc) applyRedis(r *redisLimiter) { f(r) }

// withPrefix sets the prefix of every key (default "throttle"). Keys of one
// request group look like "{throttle:dingtalk}:r:<rule key>": the braces are
// a hash tag that keeps them in one Redis Cluster slot.
func withPrefix(prefix string) redisOption {
	return redisOptionFunc(func(r *redisLimiter) { r.prefix = prefix })
}

// badPrefixRune is what a Prefix must not hold: braces, which would break
// its keys' hash tag, and control characters (a newline, a tab), which a
// prefix read from a file or an environment variable brings by mistake
// ("billing\n" is another fleet's keys than "billing", each admitting the
// whole limit). A space inside ("billing eu") is a name; one at either end
// is refused with the rest of the check.
func badPrefixRune(r rune) bool {
	return r == '{' || r == '}' || unicode.IsControl(r)
}

// newRedis returns the Redis limiter on client, which may be a single node,
// a cluster, a ring or a failover client; Shared wraps it.
func newRedis(client redis.UniversalClient, opts ...redisOption) (*redisLimiter, error) {
	if nilness.Is(client) {
		return nil, fmt.Errorf("limiter: NewShared: client must not be nil")
	}
	r := &redisLimiter{client: client, prefix: "throttle", keys: keyCache{m: make(map[keyID]any)},
		lanes: lanes{m: make(map[string]*lane)}, epochs: make(map[string]epochState), now: time.Now}
	for _, o := range opts {
		o.applyRedis(r)
	}
	r.addr = redisAddrs(client)
	if r.prefix == "" || len(r.prefix) > 64 || strings.ContainsFunc(r.prefix, badPrefixRune) || strings.TrimSpace(r.prefix) != r.prefix {
		return nil, fmt.Errorf("limiter: NewShared: Prefix must be 1..64 bytes without braces, control characters or spaces at either end, got %q", r.prefix)
	}
	return r, nil
}

// ruleKey is the Redis key holding a rule's state for group.
func (l *redisLimiter) ruleKey(group, key string) string {
	return redisKey(l.prefix, ruleTag, group, key)
}

// penaltyKey is the Redis key holding a penalty on scope for group.
func (l *redisLimiter) penaltyKey(group, scope string) string {
	return redisKey(l.prefix, penaltyTag, group, scope)
}

const (
	ruleTag    = 'r'
	penaltyTag = 'p'
	// liftTag names the mark a lift leaves on a scope (lift.go).
	liftTag = 'l'
	// epochTag names the group's epoch marker; its name is empty.
	epochTag = 'e'
)

// redisKey builds "{prefix:group}:tag:name": the braces are the hash tag
// that keeps every key of a group in one cluster slot.
func redisKey(prefix string, tag byte, group, name string) string {
	return "{" + prefix + ":" + group + "}:" + string(tag) + ":" + name
}

// Reserve implements Limiter in one script call. Requests of the same
// group that arrive while calls for it are in flight go together in the
// next call, whatever their rules (see coalesce.go and
// SharedConfig.NoCoalescing).
func (l *redisLimiter) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := req.validate(); err != nil {
		return Reservation{}, err
	}
	// A caller that gave up is told so, not that Redis failed.
	if err := ctx.Err(); err != nil {
		return Reservation{}, err
	}
	if len(req.Rules) == 0 && len(req.Scopes) == 0 {
		return Reservation{ok: true, ruleIndex: -1, now: time.Now()}, nil
	}
	var res Reservation
	var err error
	if ln := l.lanes.get(&req); ln != nil {
		res, err = ln.reserve(ctx, l, req)
	} else {
		res, err = l.reserveAlone(ctx, req)
	}
	if err == nil && res.ok {
		res.settle(l, &req)
	}
	return res, err
}

// reserveAlone makes req's own call. When the caller's context ends while
// the call is in flight and the call still answers (a client that does not
// apply context deadlines to its socket, or a cancellation, which no
// client applies), the slot booked is given back before the context's
// error is returned, as for a request whose shared call is in flight. A
// deadline that cuts the call short leaves what the script may have booked
// (the deadline is the caller's bound; the slot lost errs on the side of
// the provider's limit).
func (l *redisLimiter) reserveAlone(ctx context.Context, req Request) (Reservation, error) {
	one := [1]Request{req}
	var out [1]Reservation
	if err := l.reserveN(ctx, one[:], out[:]); err != nil {
		return Reservation{}, err
	}
	if err := ctx.Err(); err != nil {
		if out[0].ok {
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = l.cancel(gctx, req, out[0])
			cancel()
		}
		return Reservation{}, err
	}
	return out[0], nil
}

// reserveN reserves reqs, which all carry the same group, in one script
// call, in order, each as if it were its own call at the same instant; out
// receives one Reservation per request. Each run of consecutive requests
// with the same rules and scopes is one segment of the call (reserve.lua).
func (l *redisLimiter) reserveN(ctx context.Context, reqs []Request, out []Reservation) error {
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	// What this replica knew of the group's state when it sent the call:
	// every reply to a call sent before it learnt of a loss is affected,
	// not only the first one to arrive.
	known := l.epochOf(reqs[0].Group)
	// A run of requests with the same rules is one segment, decided in one
	// loop (the hot key's call); requests of many rule sets go lean.
	a.segs = appendSegmentEnds(a.segs, reqs)
	lean := len(a.segs) > 1 && allLean(reqs)
	s := reserveScript
	if lean {
		l.appendLean(a, reqs, bookedAhead(known, time.Now()))
	} else if len(a.segs) == 1 && len(reqs) == 1 && onlyPaced(&reqs[0]) {
		// The common call: one request of paced rules.
		s = oneScript
		l.appendOne(a, reqs, bookedAhead(known, time.Now()))
	} else if len(a.segs) == 1 {
		l.appendSegment(a, reqs)
	} else {
		l.appendBatch(a, reqs)
	}
	reply, err := l.run(ctx, s, a.list).Text()
	if err != nil {
		if cerr := ctxEnded(ctx); cerr != nil {
			// The caller gave up: that says nothing about Redis.
			return cerr
		}
		l.reloadCluster()
		return unavailable("reserve", l.callError(ctx, err))
	}
	answered := time.Now()
	var flags replyFlags
	if lean {
		flags, err = parseLean(reqs, reply, out)
	} else {
		flags, err = parseSegments(reqs, a.segs, reply, out)
	}
	if err != nil {
		return err
	}
	l.settle(reqs, out, flags, known, answered)
	return nil
}

// ctxEnded is ctx's error, or context.DeadlineExceeded once its deadline
// has passed: a client that applies the deadline to its socket reports the
// timeout as soon as the deadline passes, before the context says so, and
// it must not count as Redis failing.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// appendOne builds one.lua's call of one, a single request of paced rules:
// the keys and arguments of its segment, led by epochMode(epoch) and the
// epoch marker's TTL.
func (l *redisLimiter) appendOne(a *scriptArgs, one []Request, epoch bool) {
	req := &one[0]
	a.begin(oneScript, len(req.Scopes)+1+len(req.Rules))
	a.list = l.appendSegmentKeys(a.list, req, true)
	first := len(a.list)
	var markerTTL int64
	a.list, markerTTL = appendSegmentArgs(a.list, one, false)
	a.list[first], a.list[first+1] = epochMode(epoch), ttlArg(markerTTL)
}

// onlyPaced reports whether every rule of req is paced and uncapped.
func onlyPaced(req *Request) bool {
	for i := range req.Rules {
		if r := core(&req.Rules[i]); r.Kind != rulecore.Paced || r.AheadCapped {
			return false
		}
	}
	return true
}

// appendRuleArgs appends each rule's arguments to the script's, then the
// book-ahead caps, and returns how long the epoch marker must live (ms): at
// least as long as the longest-lived paced key, and past the latest slot
// the request may book (MaxWait ahead) whatever its rules: a marker gone
// while this replica holds slots ahead reads as a loss of the state.
func appendRuleArgs(list []any, req *Request, waitUs int64) (_ []any, markerTTL int64) {
	var clock time.Time
	markerTTL = max(int64(time.Second/time.Millisecond), waitUs/1000+1)
	for i := range req.Rules {
		r := core(&req.Rules[i])
		switch r.Kind {
		case rulecore.Paced:
			markerTTL = max(markerTTL, pacedTTL(r, waitUs))
			list = append(list, boxedPaced, r.ArgT, r.ArgTol)
			continue
		case rulecore.Concurrency:
			list = append(list, boxedConcurrency, boxInt64(r.Limit), r.ArgT, boxInt64(newLeaseID()))
			continue
		case rulecore.Window:
			list = appendWindowArgs(list, r)
			continue
		}
		if clock.IsZero() {
			clock = time.Now()
		}
		b := r.Windows(clock)
		list = append(list, boxedCalendar, boxInt64(r.Limit), boxInt64(b[0]), boxInt64(b[1]), boxInt64(b[2]), boxInt64(b[3]))
	}
	for i := range req.Rules {
		if r := core(&req.Rules[i]); r.AheadCapped {
			list = append(list, boxInt(i+1), r.ArgAhead)
		}
	}
	return list, markerTTL
}

// pacedTTL is the longest (ms) a paced rule's key may live after a booking
// by a request that waits at most waitUs: the booked time lies at most
// MaxWait + tolerance + T ahead. The key itself lives until its booked time
// has passed (the scripts' tat_px); the group's epoch marker lives at least
// this long.
func pacedTTL(r *rulecore.Rule, waitUs int64) int64 {
	return (waitUs+r.ToleranceUs+r.IntervalUs)/1000 + 1
}

// cancel gives res back in one script call (see Reservation.Cancel).
func (l *redisLimiter) cancel(ctx context.Context, req Request, res Reservation) error {
	return l.cancelAll(ctx, req, []Reservation{res})
}

// cancelAll gives back the slots of several reservations of requests with
// req's group and rules, in one script call. They go newest first: a paced
// slot comes back only while it is the last one booked, so undoing the
// newest makes the one before it the last.
func (l *redisLimiter) cancelAll(ctx context.Context, req Request, rs []Reservation) error {
	if len(req.Rules) == 0 {
		return nil
	}
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	n := 0
	for _, res := range rs {
		if res.ok && len(res.booked) == len(req.Rules) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	a.begin(cancelScript, n*len(req.Rules))
	for j := len(rs) - 1; j >= 0; j-- {
		if res := &rs[j]; res.ok && len(res.booked) == len(req.Rules) {
			for i := range req.Rules {
				a.list = append(a.list, l.keys.get(l.prefix, ruleTag, req.Group, req.Rules[i].Key()))
			}
		}
	}
	for j := len(rs) - 1; j >= 0; j-- {
		res := &rs[j]
		if !res.ok || len(res.booked) != len(req.Rules) {
			continue
		}
		for i := range req.Rules {
			r := core(&req.Rules[i])
			switch r.Kind {
			case rulecore.Paced:
				a.list = append(a.list, boxedPaced, boxInt64(res.booked[i]), r.ArgT)
			case rulecore.Calendar:
				a.list = append(a.list, boxedCalendar, boxInt64(res.booked[i]), boxInt64(res.now.UnixMicro()))
			case rulecore.Window:
				a.list = append(a.list, boxedWindow, boxInt64(res.booked[i]), emptyArg)
			default:
				a.list = append(a.list, boxedConcurrency, boxInt64(res.booked[i]), emptyArg)
			}
		}
	}
	if err := l.run(ctx, cancelScript, a.list).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("cancel", l.callError(ctx, err))
	}
	return nil
}

// release ends res's leases: one call, only for requests with a
// concurrency rule.
func (l *redisLimiter) release(ctx context.Context, req Request, res Reservation) error {
	if !res.ok || len(res.booked) != len(req.Rules) {
		return nil
	}
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	n := 0
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Concurrency {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	a.begin(cancelScript, n)
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Concurrency {
			a.list = append(a.list, l.keys.get(l.prefix, ruleTag, req.Group, req.Rules[i].Key()))
		}
	}
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Concurrency {
			a.list = append(a.list, boxedConcurrency, boxInt64(res.booked[i]), emptyArg)
		}
	}
	if err := l.run(ctx, cancelScript, a.list).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("release", l.callError(ctx, err))
	}
	return nil
}

// reloadCluster asks a cluster client to read the cluster's layout again
// after a failure: go-redis refreshes it only on redirects and once a minute,
// so after a master crash it would keep calling the dead node.
func (l *redisLimiter) reloadCluster() {
	if cc, ok := l.client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// redisAddrs names the servers a go-redis client dials, for errors and the
// log of an outage: a wrong address (a typo, a port) shows there at once.
// Addresses only, never the options' credentials; "" for a Sentinel
// failover client, whose options hold a placeholder, not the address.
func redisAddrs(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "FailoverClient" {
			return a
		}
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		addrs := slices.Sorted(maps.Values(c.Options().Addrs)) // shard name -> address
		return strings.Join(addrs, ",")
	}
	return ""
}

// callError says which Redis failed a call (made with ctx, to which run
// adds the limiter's Timeout) and, when the call ran out of time while ctx
// had not, that the time was that Timeout.
func (l *redisLimiter) callError(ctx context.Context, err error) error {
	switch {
	case l.addr == "":
		return err
	case l.timeout > 0 && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no answer within the Timeout of %v: %w", l.addr, l.timeout, err)
	}
	return fmt.Errorf("%s: %w", l.addr, err)
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, op, err)
}
