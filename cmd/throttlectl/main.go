package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// Exit codes.
const (
	exitOK      = 0
	exitActive  = 1 // penalties active or replica faults (status -check), or a lift declined
	exitFailure = 2 // usage, connection or configuration error, or the state not read in full
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage:
  throttlectl [-redis ADDR|URL] [-prefix PREFIX] [-timeout D] status [-json] [-check] [PROVIDER]
  throttlectl [-redis ADDR|URL] [-prefix PREFIX] [-timeout D] watch [-n COUNT] [PROVIDER]
  throttlectl [-redis ADDR|URL] [-prefix PREFIX] [-timeout D] lift [-yes] -provider NAME SCOPE
  throttlectl help

PROVIDER, NAME: dingtalk, wechat, wecom, feishu, or a custom profile's name
-redis: host:port, redis://[user:password@]host:port[/db], rediss://... (TLS),
        or comma-separated addresses of a Redis Cluster
        (default $THROTTLE_REDIS, else 127.0.0.1:6379); a password may also
        come from $THROTTLE_REDIS_PASSWORD, out of the process list
-prefix: the Transports' key prefix (default "throttle")
-timeout: how long each Redis call may take (default 5s)

exit codes: 0 fine, 1 penalties active or replica faults (status -check),
            or lift declined (or the penalty changed since it was shown),
            2 usage or connection error, state not read in full, or a lift
            that replicas were not told of
`

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// common are the flags every subcommand accepts, before or after its name.
type common struct {
	redis, prefix string
	timeout       time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.redis, "redis", c.redis, "Redis address, URL, or comma-separated cluster addresses")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "key prefix of the Transports")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "timeout of each Redis call")
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := common{redis: os.Getenv("THROTTLE_REDIS"), prefix: "throttle", timeout: 5 * time.Second}
	if c.redis == "" {
		c.redis = "127.0.0.1:6379"
	}
	global := flag.NewFlagSet("throttlectl", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	c.register(global)
	err := flagError(global.Parse(args))
	if err == nil {
		err = dispatch(ctx, &c, global.Args(), stdin, stdout, stderr)
	}
	var ue *usageError
	var ae *activeError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK
	case errors.As(err, &ae):
		if ae.msg != "" {
			fmt.Fprintln(stderr, "throttlectl:", ae.msg)
		}
		return exitActive
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "throttlectl: %v\n\n%s", err, usage)
		return exitFailure
	}
	fmt.Fprintln(stderr, "throttlectl:", err)
	return exitFailure
}

// activeError ends the command with exit code 1.
type activeError struct{ msg string }

func (e *activeError) Error() string { return e.msg }

// flagError makes the flag package's parse errors usage errors.
func flagError(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{err.Error()}
}

func dispatch(ctx context.Context, c *common, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command given")
	}
	name, args := args[0], args[1:]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	switch name {
	case "status":
		jsonOut := fs.Bool("json", false, "print JSON for scripts")
		check := fs.Bool("check", false, "exit 1 when a penalty is active or a replica reports a fault")
		pos, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		provider, err := optionalProvider(pos)
		if err != nil {
			return err
		}
		return status(ctx, c, provider, *jsonOut, *check, stdout)
	case "watch":
		count := fs.Int("n", 0, "stop after this many refreshes (0: until interrupted)")
		pos, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		provider, err := optionalProvider(pos)
		if err != nil {
			return err
		}
		if *count < 0 {
			return usagef("-n must not be negative, got %d", *count)
		}
		return watch(ctx, c, provider, *count, stdout)
	case "lift":
		provider := fs.String("provider", "", "the provider (limiter group) of the scope, e.g. dingtalk")
		yes := fs.Bool("yes", false, "lift without asking")
		pos, err := parseInterleaved(fs, args)
		if err != nil {
			return err
		}
		switch {
		case len(pos) != 1:
			return usagef("lift takes exactly one SCOPE, got %d arguments", len(pos))
		case *provider == "":
			return usagef("lift needs -provider NAME (the provider whose scope is penalised)")
		}
		return lift(ctx, c, *provider, pos[0], *yes, stdin, stdout)
	case "help", "-h", "-help":
		return flag.ErrHelp
	}
	return usagef("unknown command %q", name)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("lift SCOPE -provider x" as well as "lift -provider
// x SCOPE"), which the flag package alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func optionalProvider(pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", nil
	case 1:
		return pos[0], nil
	}
	return "", usagef("at most one PROVIDER, got %q", pos)
}
