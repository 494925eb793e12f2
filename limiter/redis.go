package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reserve.lua
	reserveSource string
	//go:embed cancel.lua
	cancelSource string
	//go:embed penalize.lua
	penalizeSource string

	// Scripts run by EVALSHA and fall back to EVAL on NOSCRIPT, which cluster
	// nodes and failed-over replicas answer until they have loaded them.
	reserveScript  = newScript(reserveSource)
	cancelScript   = newScript(cancelSource)
	penalizeScript = newScript(penalizeSource)
)

// script is a Lua script with its source and SHA1 boxed once for the
// argument list.
type script struct{ source, sha any }

func newScript(src string) *script {
	return &script{source: src, sha: redis.NewScript(src).Hash()}
}

var evalshaName, evalName any = "evalsha", "eval"

// Redis is a Limiter whose state lives in Redis, shared by every replica that
// uses the same client, prefix and keys. Each Reserve takes at most one
// script call; under load, concurrent requests for the same rules share one.
type Redis struct {
	client redis.UniversalClient
	prefix string
	keys   keyCache
	lanes  lanes
}

// RedisOption configures a Redis limiter.
type RedisOption interface{ applyRedis(*Redis) }

type redisOptionFunc func(*Redis)

func (f redisOptionFunc) applyRedis(r *Redis) { f(r) }

// WithPrefix sets the prefix of every key (default "throttle"). Keys of one
// request group look like "{throttle:dingtalk}:r:<rule key>": the braces are
// a hash tag that keeps them in one Redis Cluster slot.
func WithPrefix(prefix string) RedisOption {
	return redisOptionFunc(func(r *Redis) { r.prefix = prefix })
}

// NewRedis returns a Limiter on client, which may be a single node, a
// cluster, a ring or a failover client.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("limiter: NewRedis: client must not be nil")
	}
	r := &Redis{client: client, prefix: "throttle", keys: keyCache{m: make(map[keyID]any)},
		lanes: lanes{seed: maphash.MakeSeed(), m: make(map[uint64]*lane)}}
	for _, o := range opts {
		o.applyRedis(r)
	}
	if r.prefix == "" || len(r.prefix) > 64 || strings.ContainsAny(r.prefix, "{}") {
		return nil, fmt.Errorf("limiter: NewRedis: prefix must be 1..64 bytes without braces, got %q", r.prefix)
	}
	return r, nil
}

// Client returns the Redis client the limiter uses.
func (l *Redis) Client() redis.UniversalClient { return l.client }

// RuleKey is the Redis key holding a rule's state for group.
func (l *Redis) RuleKey(group, key string) string { return redisKey(l.prefix, ruleTag, group, key) }

// PenaltyKey is the Redis key holding a penalty on scope for group.
func (l *Redis) PenaltyKey(group, scope string) string {
	return redisKey(l.prefix, penaltyTag, group, scope)
}

const (
	ruleTag    = 'r'
	penaltyTag = 'p'
)

// redisKey builds "{prefix:group}:tag:name": the braces are the hash tag
// that keeps every key of a group in one cluster slot.
func redisKey(prefix string, tag byte, group, name string) string {
	return "{" + prefix + ":" + group + "}:" + string(tag) + ":" + name
}

// Reserve implements Limiter in one script call. Requests with the same
// rules and scopes that arrive while a call for them is in flight go
// together in the next call (see WithoutCoalescing).
func (l *Redis) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := req.validate(); err != nil {
		return Reservation{}, err
	}
	if len(req.Rules) == 0 && len(req.Scopes) == 0 {
		return Reservation{OK: true, Rule: -1, Now: time.Now()}, nil
	}
	if ln := l.lanes.get(&req); ln != nil {
		return ln.reserve(ctx, l, req)
	}
	one := [1]Request{req}
	var out [1]Reservation
	if err := l.reserveN(ctx, one[:], out[:]); err != nil {
		return Reservation{}, err
	}
	return out[0], nil
}

// reserveN reserves reqs, which carry the same group, rules and scopes, in
// one script call, in order, as if each were its own call at the same
// instant; out receives one Reservation per request.
func (l *Redis) reserveN(ctx context.Context, reqs []Request, out []Reservation) error {
	req := &reqs[0]
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	a.begin(reserveScript, len(req.Scopes)+len(req.Rules))
	for _, s := range req.Scopes {
		a.list = append(a.list, l.keys.get(l.prefix, penaltyTag, req.Group, s))
	}
	for i := range req.Rules {
		a.list = append(a.list, l.keys.get(l.prefix, ruleTag, req.Group, req.Rules[i].key))
	}
	a.list = append(a.list, boxInt(len(reqs)), boxInt(len(req.Scopes)))
	var waitUs int64
	for i := range reqs {
		w := int64(reqs[i].MaxWait / time.Microsecond)
		waitUs = max(waitUs, w)
		a.list = append(a.list, boxInt64(w), boxInt64(reqs[i].notBefore))
	}
	var clock time.Time
	for i := range req.Rules {
		r := &req.Rules[i]
		switch r.kind {
		case pacedRule:
			// The booked time lies at most MaxWait + tolerance + T ahead,
			// so the key can go that long after its last booking.
			ttl := (waitUs+r.toleranceUs+r.intervalUs)/1000 + 1
			a.list = append(a.list, boxedPaced, r.argT, r.argTol, ttlArg(ttl))
			continue
		case concurrencyRule:
			a.list = append(a.list, boxedConcurrency, boxInt64(r.limit), r.argT, boxInt64(newLeaseID()))
			continue
		case windowRule:
			a.list = r.appendWindowArgs(a.list)
			continue
		}
		if clock.IsZero() {
			clock = time.Now()
		}
		b := r.windows(clock)
		a.list = append(a.list, boxedCalendar, boxInt64(r.limit), boxInt64(b[0]), boxInt64(b[1]), boxInt64(b[2]), boxInt64(b[3]))
	}
	reply, err := l.run(ctx, reserveScript, a.list).Text()
	if err != nil {
		l.reloadCluster()
		return unavailable("reserve", err)
	}
	answered := time.Now()
	if err := parseReserve(reqs, reply, out); err != nil {
		return err
	}
	for i := range out {
		out[i].answered = answered
	}
	return nil
}

// parseReserve reads the script's reply (see reserve.lua) into out without
// allocating beyond the Reservations' own fields.
func parseReserve(reqs []Request, reply string, out []Reservation) error {
	malformed := func() error { return fmt.Errorf("%w: reserve: malformed reply %q", ErrUnavailable, reply) }
	line, rest, _ := strings.Cut(reply, "\n")
	secs, usecs, _ := strings.Cut(line, " ")
	sec, err1 := strconv.ParseInt(secs, 10, 64)
	usec, err2 := strconv.ParseInt(usecs, 10, 64)
	if err1 != nil || err2 != nil {
		return malformed()
	}
	now := time.Unix(sec, usec*int64(time.Microsecond))
	penalised := false
	for r := range reqs {
		// A penalty refuses every request of the call: its line comes once.
		if !penalised {
			if rest == "" {
				return malformed()
			}
			line, rest, _ = strings.Cut(rest, "\n")
		}
		var head [3]int64
		fields := line
		for i := range head {
			var field string
			field, fields, _ = strings.Cut(fields, " ")
			n, err := strconv.ParseInt(field, 10, 64)
			if err != nil {
				return malformed()
			}
			head[i] = n
		}
		status, amount, index := head[0], head[1], head[2]
		req := &reqs[r]
		res := Reservation{Rule: int(index) - 1, Now: now}
		d := time.Duration(amount) * time.Microsecond
		switch status {
		case 0:
			res.OK, res.Delay = true, d
			if len(req.Rules) > 0 {
				res.Booked = make([]int64, len(req.Rules))
			}
			for i := range res.Booked {
				var field string
				field, fields, _ = strings.Cut(fields, " ")
				b, err := strconv.ParseInt(field, 10, 64)
				if err != nil {
					return malformed()
				}
				res.Booked[i] = b
			}
		case 1:
			res.RetryAfter = d
		case 2:
			penalised = true
			res.RetryAfter, res.Rule = d, -1
			p := &Penalty{Until: now.Add(d)}
			if int(index) >= 1 && int(index) <= len(req.Scopes) {
				p.Scope = req.Scopes[index-1]
			}
			// The stored value ends the reply; it is "end|code".
			stored := fields
			if rest != "" {
				stored += "\n" + rest
			}
			if _, code, found := strings.Cut(stored, "|"); found {
				p.Code = code
			}
			res.Penalty = p
		default:
			return fmt.Errorf("%w: reserve: unexpected status in %q", ErrUnavailable, reply)
		}
		out[r] = res
	}
	return nil
}

// Cancel implements Limiter in one script call.
func (l *Redis) Cancel(ctx context.Context, req Request, res Reservation) error {
	return l.cancelAll(ctx, req, []Reservation{res})
}

// cancelAll gives back the slots of several reservations of requests with
// req's group and rules, in one script call. They go newest first: a paced
// slot comes back only while it is the last one booked, so undoing the
// newest makes the one before it the last.
func (l *Redis) cancelAll(ctx context.Context, req Request, rs []Reservation) error {
	if len(req.Rules) == 0 {
		return nil
	}
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	n := 0
	for _, res := range rs {
		if res.OK && len(res.Booked) == len(req.Rules) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	a.begin(cancelScript, n*len(req.Rules))
	for j := len(rs) - 1; j >= 0; j-- {
		if res := &rs[j]; res.OK && len(res.Booked) == len(req.Rules) {
			for i := range req.Rules {
				a.list = append(a.list, l.keys.get(l.prefix, ruleTag, req.Group, req.Rules[i].key))
			}
		}
	}
	for j := len(rs) - 1; j >= 0; j-- {
		res := &rs[j]
		if !res.OK || len(res.Booked) != len(req.Rules) {
			continue
		}
		for i := range req.Rules {
			r := &req.Rules[i]
			switch r.kind {
			case pacedRule:
				a.list = append(a.list, boxedPaced, boxInt64(res.Booked[i]), r.argT)
			case calendarRule:
				a.list = append(a.list, boxedCalendar, boxInt64(res.Booked[i]), emptyArg)
			case windowRule:
				a.list = append(a.list, boxedWindow, boxInt64(res.Booked[i]), emptyArg)
			default:
				a.list = append(a.list, boxedConcurrency, boxInt64(res.Booked[i]), emptyArg)
			}
		}
	}
	if err := l.run(ctx, cancelScript, a.list).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("cancel", err)
	}
	return nil
}

// Release implements Limiter: one call, only for requests with a
// concurrency rule.
func (l *Redis) Release(ctx context.Context, req Request, res Reservation) error {
	if !res.OK || len(res.Booked) != len(req.Rules) {
		return nil
	}
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	n := 0
	for i := range req.Rules {
		if req.Rules[i].kind == concurrencyRule {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	a.begin(cancelScript, n)
	for i := range req.Rules {
		if req.Rules[i].kind == concurrencyRule {
			a.list = append(a.list, l.keys.get(l.prefix, ruleTag, req.Group, req.Rules[i].key))
		}
	}
	for i := range req.Rules {
		if req.Rules[i].kind == concurrencyRule {
			a.list = append(a.list, boxedConcurrency, boxInt64(res.Booked[i]), emptyArg)
		}
	}
	if err := l.run(ctx, cancelScript, a.list).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("release", err)
	}
	return nil
}

// Penalize implements Limiter.
func (l *Redis) Penalize(ctx context.Context, group string, p Penalty) error {
	if err := p.validate(group); err != nil {
		return err
	}
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	a.begin(penalizeScript, 1)
	a.list = append(a.list, l.keys.get(l.prefix, penaltyTag, group, p.Scope),
		boxInt64(p.Until.UnixMicro()), p.Code, l.channel(), group+"\n"+p.Scope+"\n")
	if err := l.run(ctx, penalizeScript, a.list).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("penalize", err)
	}
	return nil
}

// run sends EVALSHA and, when the node does not know the script (a fresh
// cluster node, a promoted replica, SCRIPT FLUSH), EVAL with the source,
// which also loads it for next time. args is "evalsha sha numkeys keys... argv...".
func (l *Redis) run(ctx context.Context, s *script, args []any) *redis.Cmd {
	cmd := l.client.Do(ctx, args...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = evalName, s.source
		cmd = l.client.Do(ctx, args...)
	}
	return cmd
}

// reloadCluster asks a cluster client to read the cluster's layout again
// after a failure: go-redis refreshes it only on redirects and once a minute,
// so after a master crash it would keep calling the dead node.
func (l *Redis) reloadCluster() {
	if cc, ok := l.client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// Ping checks that Redis answers, e.g. to decide when to leave a fallback.
func (l *Redis) Ping(ctx context.Context) error {
	if err := l.client.Ping(ctx).Err(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, op, err)
}
