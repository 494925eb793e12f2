package limiter

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// reserve.lua and one.lua each run after state.lua, which holds what
	// they share.
	//go:embed state.lua
	stateSource string
	//go:embed reserve.lua
	reserveBody string
	//go:embed one.lua
	oneBody       string
	reserveSource = stateSource + reserveBody
	oneSource     = stateSource + oneBody
	//go:embed cancel.lua
	cancelSource string
	//go:embed penalize.lua
	penalizeSource string

	// Scripts run by EVALSHA and fall back to EVAL on NOSCRIPT, which cluster
	// nodes and failed-over replicas answer until they have loaded them.
	reserveScript  = newScript(reserveSource)
	oneScript      = newScript(oneSource)
	cancelScript   = newScript(cancelSource).sentOnce()
	penalizeScript = newScript(penalizeSource)
)

// script is a Lua script with its source and SHA1 boxed once for the
// argument list. once marks a script whose second run would do harm: it is
// sent as a sentOnce command.
type script struct {
	source, sha any
	once        bool
}

func newScript(src string) *script {
	return &script{source: src, sha: redis.NewScript(src).Hash()}
}

// sentOnce marks s to be sent at most once.
func (s *script) sentOnce() *script {
	s.once = true
	return s
}

// sentOnce is a command the go-redis client sends at most once. The
// client's retries (MaxRetries, 3 by default) send a command again when its
// connection failed before the reply came, though Redis may have run it:
// a reserve run twice books a slot no request uses (capacity lost, never a
// send too many) and a penalty recorded twice is recorded once, but a
// give-back run twice returns a second slot, one request more than a window
// or calendar rule allows. A give-back whose reply is lost fails instead,
// and its slot stays booked. go-redis still sends again a command that
// never reached the connection.
type sentOnce struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again.
func (sentOnce) NoRetry() bool { return true }

var evalshaName, evalName any = "evalsha", "eval"

// run sends EVALSHA and, when the node does not know the script (a fresh
// cluster node, a promoted replica, SCRIPT FLUSH), EVAL with the source,
// which also loads it for next time. args is "evalsha sha numkeys keys... argv...".
func (l *redisLimiter) run(ctx context.Context, s *script, args []any) *redis.Cmd {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		if ctx, cancel = l.bound.within(ctx, l.timeout); cancel != nil {
			defer cancel()
		}
	}
	cmd := l.send(ctx, s, args)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = evalName, s.source
		cmd = l.send(ctx, s, args)
	}
	return cmd
}

// send sends one call of s, at most once when s says so.
func (l *redisLimiter) send(ctx context.Context, s *script, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if s.once {
		_ = l.client.Process(ctx, sentOnce{cmd})
	} else {
		_ = l.client.Process(ctx, cmd)
	}
	return cmd
}
