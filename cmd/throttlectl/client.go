package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
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
	if c.timeout <= 0 {
		// An expired context otherwise, reported as Redis not answering.
		return nil, nil, usagef("-timeout must be positive, got %v", c.timeout)
	}
	client, where, err := newClient(c.redis, c.timeout)
	if err != nil {
		return nil, nil, err
	}
	// The first call connects too: it may take the dial timeout (TCP and
	// TLS handshake) and then -timeout, so that a failed handshake is
	// reported as itself rather than as this call's deadline.
	pctx, cancel := context.WithTimeout(ctx, dialTimeout(c.timeout)+c.timeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		if e := explainPlain(where, err); e != nil && !strings.Contains(c.redis, "rediss://") {
			return nil, nil, e
		}
		return nil, nil, explain(where, err)
	}
	// One address of a cluster node: talk to the whole cluster.
	if single, ok := client.(*redis.Client); ok {
		if info, err := single.Info(pctx, "cluster").Result(); err == nil && strings.Contains(info, "cluster_enabled:1") {
			opts := single.Options()
			client.Close()
			client = redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: []string{opts.Addr}, Username: opts.Username, Password: opts.Password, TLSConfig: opts.TLSConfig,
				Dialer: opts.Dialer, DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
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
			return nil, "", usagef("-redis %s has an empty address", shownSpec(spec))
		}
		var o *redis.Options
		if strings.Contains(p, "://") {
			var err error
			if o, err = redis.ParseURL(p); err != nil {
				return nil, "", usagef("-redis: %v (want redis://[user:password@]host:port[/db] or rediss://...)", redactErr(err, spec))
			}
		} else {
			if _, _, err := net.SplitHostPort(p); err != nil {
				if strings.Contains(spec, "@") {
					// A part of a URL whose password held a ',' (split
					// above): not shown.
					return nil, "", usagef("-redis %s: want host:port or a redis:// URL (write ',' in a password as %%2C)", shownSpec(spec))
				}
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
	dial := dialTimeout(timeout)
	var dialer func(context.Context, string, string) (net.Conn, error)
	if o.TLSConfig != nil {
		dialer = tlsDialer(o.TLSConfig, dial)
	}
	if len(opts) == 1 {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dial, timeout, timeout
		o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries = true, 1, 1
		o.Dialer = dialer
		return redis.NewClient(o), where[0], nil
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: where, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, Dialer: dialer,
		DialTimeout: dial, ReadTimeout: timeout, WriteTimeout: timeout,
		ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1,
	})
	return cc, strings.Join(where, ","), nil
}

// tlsDialer dials TCP and then makes the TLS handshake itself, within the
// dial timeout, so that a handshake that fails or never ends (a TLS client
// at a plain port waits for an answer that never comes) is a *tlsError that
// says TLS, not a bare "context deadline exceeded".
func tlsDialer(cfg *tls.Config, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := &net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(hctx); err != nil {
			conn.Close()
			return nil, &tlsError{addr: addr, timeout: timeout, err: err}
		}
		return tc, nil
	}
}

// tlsError is a failed TLS handshake.
type tlsError struct {
	addr    string
	timeout time.Duration
	err     error
}

func (e *tlsError) Error() string { return "TLS handshake with " + e.addr + ": " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// dialTimeout is how long connecting may take: -timeout, at most 3s.
func dialTimeout(timeout time.Duration) time.Duration { return min(timeout, 3*time.Second) }

// explain turns a failed first call into a message that says what to fix.
func explain(where string, err error) error {
	msg := err.Error()
	if e := explainTLS(where, err); e != nil {
		return e
	}
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

// explainTLS says what went wrong with TLS, when something did: an
// untrusted certificate, a handshake that failed or never completed, the
// server's refusal after it (a client certificate it wants), or a plain
// connection to a port that speaks TLS. It returns nil for other errors.
func explainTLS(where string, err error) error {
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return fmt.Errorf("Redis at %s: its TLS certificate is not trusted (%v); "+
			"point SSL_CERT_FILE at the CA that signed it, or check the host name", where, certErr.Err)
	}
	var te *tlsError
	if errors.As(err, &te) {
		var netErr net.Error
		if errors.Is(te.err, context.DeadlineExceeded) || (errors.As(te.err, &netErr) && netErr.Timeout()) {
			return fmt.Errorf("Redis at %s did not complete a TLS handshake within %s: is that port TLS? "+
				"(rediss:// is for a TLS port; use redis:// for a plain one)", where, te.timeout)
		}
		if errors.Is(te.err, io.EOF) || strings.Contains(te.err.Error(), "first record does not look like a TLS handshake") {
			return fmt.Errorf("Redis at %s does not speak TLS on that port (%v): use redis:// for a plain port", where, te.err)
		}
		return fmt.Errorf("Redis at %s: the TLS handshake failed: %v", where, te.err)
	}
	if msg := err.Error(); strings.Contains(msg, "tls: ") {
		hint := ""
		if strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate") {
			hint = " (the server wants a client certificate, which throttlectl does not send: " +
				"set tls-auth-clients optional, or use a port that does not require one)"
		}
		return fmt.Errorf("Redis at %s refused the TLS connection: %v%s", where, err, hint)
	}
	return nil
}

// explainPlain says that a plain connection closed at once may have reached
// a TLS port.
func explainPlain(where string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("Redis at %s closed the connection without answering: "+
			"if that port speaks TLS, use rediss://%s (%v)", where, where, err)
	}
	return nil
}

// redactErr says why a URL of spec (the whole -redis, split at commas) did
// not parse, keeping its password out. The parser quotes the
// URL as far as it read it, cut at a '#', and a '/' or '?' in the password
// ends the host early and is quoted as a bad port, while a ',' in it split
// the URL in two: no replacement can find every piece of the password in
// its text. Where spec holds credentials, it is named by its host alone,
// with the usual cause.
func redactErr(err error, spec string) string {
	if !strings.Contains(spec, "@") {
		return err.Error()
	}
	return fmt.Sprintf("the URL %s does not parse (the parser's message is not shown: it may quote the password); "+
		"in the user name and password, write '/', '?', '#', '@' and ',' as %%2F, %%3F, %%23, %%40 and %%2C", shownSpec(spec))
}

// shownSpec is s as a message may show it: quoted, with everything before
// its last '@' (user name and password) left out.
func shownSpec(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q", "<credentials>@"+s[at+1:])
}
