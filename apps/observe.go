package apps

import (
	"bytes"
	"io"
	"net/http"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/providers"
)

// maxExchangeBody bounds what Observe buffers of a token call's request and
// answer: both are a few hundred bytes.
const maxExchangeBody = 16 << 10

// Observe returns a RoundTripper that sends through base and learns from
// the token exchanges it carries to their providers: those the Transport
// matched to the provider's profile, or sent to the provider's public hosts
// or those given in Config.Hosts. An answer is learned only when it passes
// the provider's checks (HTTP 200, its success code, a token and lifetime
// of sane form). Other requests pass untouched, at the cost of a path
// comparison. The Transport wraps its base transport with it
// (throttle.WithApps); wrap a client's transport yourself only when its
// exchanges do not go through the Transport.
func (b *Book) Observe(base http.RoundTripper) http.RoundTripper {
	return &observer{book: b, base: base}
}

type observer struct {
	book *Book
	base http.RoundTripper
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	path := apipath.Sent(req.URL)
	ex := exchangeFor(req.Method, path)
	if ex == nil {
		return o.base.RoundTrip(req)
	}
	if !o.book.fromProvider(req, ex.Provider) {
		// A token path on a host that is not the provider's: anything
		// could answer there. Sent untouched, learned from never.
		o.book.refused.Add(1)
		return o.base.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		// RoundTrip must not modify req: send a copy whose body replays
		// what was read.
		var err error
		reqBody, err = io.ReadAll(io.LimitReader(req.Body, maxExchangeBody+1))
		if err != nil {
			req.Body.Close()
			return nil, err
		}
		sent := req.Clone(req.Context())
		if len(reqBody) > maxExchangeBody {
			// Not a token call after all: send it whole, learn nothing.
			sent.Body = readCloser{io.MultiReader(bytes.NewReader(reqBody), req.Body), req.Body}
		} else {
			req.Body.Close()
			sent.Body = io.NopCloser(bytes.NewReader(reqBody))
			sent.ContentLength = int64(len(reqBody))
		}
		req = sent
	}
	resp, err := o.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || len(reqBody) > maxExchangeBody {
		return resp, err
	}
	respBody, _ := providers.PeekBody(resp, maxExchangeBody)
	if len(respBody) == 0 || len(respBody) >= maxExchangeBody {
		return resp, nil
	}
	ctx := req.Context()
	lookup := func(tok string) (App, bool) {
		if tok == "" {
			return App{}, false
		}
		return o.book.Lookup(ctx, tok)
	}
	grants := read(ex, path, req.URL.Query(), reqBody, respBody, lookup)
	if len(grants) == 0 {
		// An error answer, or one that fails the provider's checks.
		o.book.refused.Add(1)
	}
	for _, g := range grants {
		_ = o.book.Learn(ctx, g.token, g.app, g.ttl)
	}
	return resp, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
