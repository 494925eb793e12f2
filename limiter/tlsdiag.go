package limiter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// tlsProbeTimeout bounds the one call that looks for a TLS failure: go-redis's
// default dial timeout, long enough for a handshake to fail as itself.
const tlsProbeTimeout = 5 * time.Second

// diagnoseTLS runs when the replica falls back. A TLS handshake the client
// cannot complete (an untrusted certificate, a plain port) surfaces to the
// limiter's short calls as "context deadline exceeded", because go-redis's
// dial outlasts them; one call given the dial's own time shows the cause,
// and the operator is told it is TLS.
func (s *Shared) diagnoseTLS(client redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), tlsProbeTimeout)
	defer cancel()
	err := client.Ping(ctx).Err()
	if err == nil || !isTLSError(err) {
		return
	}
	s.cfg.Logger.Warn("throttle: Redis refuses this replica's TLS connection; the limiter falls back until it is fixed "+
		"(check the client's TLS settings: the server's certificate, its CA, the port)", "error", err)
}

// isTLSError reports a failure of the TLS handshake or of the certificate.
func isTLSError(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &header) || strings.Contains(err.Error(), "tls: ")
}

// usesTLS reports whether the client connects with TLS, as far as its type
// says.
func usesTLS(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().TLSConfig != nil
	case *redis.ClusterClient:
		return c.Options().TLSConfig != nil
	}
	return false
}
