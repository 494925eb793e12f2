package throttle

import (
	"net/http"

	"github.com/quotaware/throttle/internal/tokens"
	"github.com/quotaware/throttle/limiter"
)

// WithoutSharedTokens turns off the sharing of token exchanges between
// replicas, which a Transport with Redis does by default: each replica's
// SDKs then fetch their own access tokens, as without the Transport.
//
// With Redis (WithRedis, or a *limiter.Shared given to WithLimiter), the Transport answers a token exchange (DingTalk
// gettoken and /v1.0/oauth2 tokens, WeChat /cgi-bin/token and stable_token,
// WeCom gettoken and the suite's tokens, Feishu tenant and app tokens) from
// the answer another replica fetched for the same credential, kept in
// Redis encrypted under keys only holders of that credential can derive,
// with its lifetime counted down; concurrent exchanges wait for the one in
// flight; a token the provider calls invalid is dropped once for the fleet.
// The README's "Tokens across replicas" says more.
func WithoutSharedTokens() Option {
	return optionFunc(func(c *config) { c.noShare = true })
}

// shareTokens wraps base with the exchange sharing of package tokens when
// the Transport has a shared limiter on Redis (from WithRedis or given with
// WithLimiter) and sharing is not turned off; it uses the limiter's client
// and key prefix. It sits under the app learning (apps.Book.Observe), which
// so learns from shared answers too.
func shareTokens(c *config, shared *limiter.Shared, base http.RoundTripper) http.RoundTripper {
	if shared == nil || c.noShare {
		return base
	}
	s, err := tokens.New(shared.Client(), tokens.WithPrefix(shared.Config().Prefix))
	if err != nil {
		// Only a bad option fails New, and these are valid: exchange
		// alone rather than fail the Transport.
		return base
	}
	return s.Wrap(base)
}
