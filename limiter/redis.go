package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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
	reserveScript  = redis.NewScript(reserveSource)
	cancelScript   = redis.NewScript(cancelSource)
	penalizeScript = redis.NewScript(penalizeSource)
)

// Redis is a Limiter whose state lives in Redis, shared by every replica that
// uses the same client, prefix and keys. Each Reserve is one script call.
type Redis struct {
	client redis.UniversalClient
	prefix string
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
	r := &Redis{client: client, prefix: "throttle"}
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
func (l *Redis) RuleKey(group, key string) string {
	return "{" + l.prefix + ":" + group + "}:r:" + key
}

// PenaltyKey is the Redis key holding a penalty on scope for group.
func (l *Redis) PenaltyKey(group, scope string) string {
	return "{" + l.prefix + ":" + group + "}:p:" + scope
}

var smallInts = func() (out [16]any) {
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func boxInt(n int) any {
	if n >= 0 && n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.Itoa(n)
}

var emptyArg any = ""

const (
	kindPaced    = "p"
	kindCalendar = "c"
)

var boxedPaced, boxedCalendar any = kindPaced, kindCalendar

// Reserve implements Limiter in one script call.
func (l *Redis) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := req.validate(); err != nil {
		return Reservation{}, err
	}
	if len(req.Rules) == 0 && len(req.Scopes) == 0 {
		return Reservation{OK: true, Rule: -1, Now: time.Now()}, nil
	}
	keys := make([]string, 0, len(req.Scopes)+len(req.Rules))
	for _, s := range req.Scopes {
		keys = append(keys, l.PenaltyKey(req.Group, s))
	}
	args := make([]any, 2, 2+6*len(req.Rules))
	args[0] = strconv.FormatInt(int64(req.MaxWait/time.Microsecond), 10)
	args[1] = boxInt(len(req.Scopes))
	var clock time.Time
	for i := range req.Rules {
		r := &req.Rules[i]
		keys = append(keys, l.RuleKey(req.Group, r.key))
		if r.unit == 0 {
			args = append(args, boxedPaced, r.argT, r.argTol, emptyArg, emptyArg, emptyArg)
			continue
		}
		if clock.IsZero() {
			clock = time.Now()
		}
		b := r.windows(clock)
		args = append(args, boxedCalendar, strconv.FormatInt(r.limit, 10),
			strconv.FormatInt(b[0], 10), strconv.FormatInt(b[1], 10),
			strconv.FormatInt(b[2], 10), strconv.FormatInt(b[3], 10))
	}
	reply, err := reserveScript.Run(ctx, l.client, keys, args...).Slice()
	if err != nil {
		return Reservation{}, unavailable("reserve", err)
	}
	return parseReserve(req, reply)
}

func parseReserve(req Request, reply []any) (Reservation, error) {
	if len(reply) < 4 {
		return Reservation{}, fmt.Errorf("%w: reserve: short reply %v", ErrUnavailable, reply)
	}
	status, _ := reply[0].(int64)
	amount, _ := reply[1].(int64)
	index, _ := reply[2].(int64)
	nowUs, _ := reply[3].(int64)
	res := Reservation{Rule: int(index) - 1, Now: time.UnixMicro(nowUs)}
	d := time.Duration(amount) * time.Microsecond
	switch status {
	case 0:
		res.OK, res.Delay = true, d
		res.Booked = make([]int64, len(req.Rules))
		for i := range res.Booked {
			if 4+i < len(reply) {
				res.Booked[i], _ = reply[4+i].(int64)
			}
		}
	case 1:
		res.RetryAfter = d
	case 2:
		res.RetryAfter, res.Rule = d, -1
		p := &Penalty{Until: res.Now.Add(d)}
		if int(index) >= 1 && int(index) <= len(req.Scopes) {
			p.Scope = req.Scopes[index-1]
		}
		if len(reply) > 4 {
			if v, ok := reply[4].(string); ok {
				if _, code, found := strings.Cut(v, "|"); found {
					p.Code = code
				}
			}
		}
		res.Penalty = p
	default:
		return Reservation{}, fmt.Errorf("%w: reserve: unexpected status %d", ErrUnavailable, status)
	}
	return res, nil
}

// Cancel implements Limiter in one script call.
func (l *Redis) Cancel(ctx context.Context, req Request, res Reservation) error {
	if !res.OK || len(req.Rules) == 0 || len(res.Booked) != len(req.Rules) {
		return nil
	}
	keys := make([]string, len(req.Rules))
	args := make([]any, 0, 3*len(req.Rules))
	for i := range req.Rules {
		r := &req.Rules[i]
		keys[i] = l.RuleKey(req.Group, r.key)
		booked := strconv.FormatInt(res.Booked[i], 10)
		if r.unit == 0 {
			args = append(args, boxedPaced, booked, r.argT)
		} else {
			args = append(args, boxedCalendar, booked, emptyArg)
		}
	}
	if err := cancelScript.Run(ctx, l.client, keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("cancel", err)
	}
	return nil
}

// Penalize implements Limiter.
func (l *Redis) Penalize(ctx context.Context, group string, p Penalty) error {
	if err := p.validate(group); err != nil {
		return err
	}
	err := penalizeScript.Run(ctx, l.client, []string{l.PenaltyKey(group, p.Scope)},
		strconv.FormatInt(p.Until.UnixMicro(), 10), p.Code).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return unavailable("penalize", err)
	}
	return nil
}

// Ping checks that Redis answers, e.g. to decide when to leave a fallback.
func (l *Redis) Ping(ctx context.Context) error {
	if err := l.client.Ping(ctx).Err(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}
