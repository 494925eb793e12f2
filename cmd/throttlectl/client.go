package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/limiter"
)

// quiet drops go-redis's own log lines: every failure reaches the user once,
// as an error that says what to fix.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// connect opens the Redis the Transports share and checks that it answers,
// turning the usual mistakes into errors that say what to fix.
func connect(ctx context.Context, c *common) (*limiter.Shared, func(), error) {
	if c.redis == "" {
		return nil, nil, usagef("-redis must not be empty")
	}
	client, where, err := newClient(c.redis, c.timeout)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, nil, explain(where, err)
	}
	// One address of a cluster node: talk to the whole cluster.
	if single, ok := client.(*redis.Client); ok {
		if info, err := single.Info(pctx, "cluster").Result(); err == nil && strings.Contains(info, "cluster_enabled:1") {
			opts := single.Options()
			client.Close()
			client = redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: []string{opts.Addr}, Username: opts.Username, Password: opts.Password, TLSConfig: opts.TLSConfig,
				DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
				ContextTimeoutEnabled: true, MaxRetries: 1,
			})
			if err := client.Ping(pctx).Err(); err != nil {
				client.Close()
				return nil, nil, explain(where, err)
			}
		}
	}
	// Refusing during an outage keeps the tool out of the registry of live
	// replicas; its own Redis errors are reported, not logged.
	l, err := limiter.NewShared(client, limiter.SharedConfig{Prefix: c.prefix, Mode: limiter.OutageRefuse, Timeout: c.timeout,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		client.Close()
		return nil, nil, usagef("-prefix: %v", err)
	}
	return l, func() { l.Close(); client.Close() }, nil
}

// newClient builds a client from -redis: an address, a URL, or several of
// either for a cluster. where names the server(s) for messages, without
// credentials.
func newClient(spec string, timeout time.Duration) (redis.UniversalClient, string, error) {
	parts := strings.Split(spec, ",")
	var opts []*redis.Options
	var where []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, "", usagef("-redis %q has an empty address", spec)
		}
		var o *redis.Options
		if strings.Contains(p, "://") {
			var err error
			if o, err = redis.ParseURL(p); err != nil {
				return nil, "", usagef("-redis: %v (want redis://[user:password@]host:port[/db] or rediss://...)", redactErr(err, p))
			}
		} else {
			if _, _, err := net.SplitHostPort(p); err != nil {
				return nil, "", usagef("-redis %q: want host:port or a redis:// URL", p)
			}
			o = &redis.Options{Addr: p}
		}
		if o.Password == "" {
			o.Password = os.Getenv("THROTTLE_REDIS_PASSWORD")
		}
		opts = append(opts, o)
		where = append(where, o.Addr)
	}
	o := opts[0]
	dial := min(timeout, 3*time.Second)
	if len(opts) == 1 {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dial, timeout, timeout
		o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries = true, 1, 1
		return redis.NewClient(o), where[0], nil
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: where, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		DialTimeout: dial, ReadTimeout: timeout, WriteTimeout: timeout,
		ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1,
	})
	return cc, strings.Join(where, ","), nil
}

// explain turns a failed first call into a message that says what to fix.
func explain(where string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"),
		strings.Contains(msg, "invalid username-password"):
		return fmt.Errorf("Redis at %s refused the credentials: wrong password (or user); "+
			"give them as redis://user:password@host:port or in $THROTTLE_REDIS_PASSWORD", where)
	case strings.Contains(msg, "NOAUTH"):
		return fmt.Errorf("Redis at %s requires a password: give it as redis://:password@host:port "+
			"or in $THROTTLE_REDIS_PASSWORD", where)
	case strings.Contains(msg, "without any password configured"):
		return fmt.Errorf("Redis at %s has no password set, but one was given: drop it from -redis", where)
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return fmt.Errorf("Redis at %s: its TLS certificate is not trusted (%v); "+
			"point SSL_CERT_FILE at the CA that signed it, or check the host name", where, certErr.Err)
	}
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return fmt.Errorf("cannot connect to Redis at %s: unknown host %q", where, dnsErr.Name)
	case errors.As(err, &opErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot connect to Redis at %s (is the address right, and is Redis up?): %v", where, err)
	}
	return fmt.Errorf("Redis at %s: %v", where, err)
}

// redactErr keeps a URL's password out of a parse error.
func redactErr(err error, rawURL string) string {
	msg := err.Error()
	if at := strings.LastIndex(rawURL, "@"); at > 0 {
		msg = strings.ReplaceAll(msg, rawURL[:at], "<credentials>")
	}
	return msg
}
