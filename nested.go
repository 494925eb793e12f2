package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// A Transport can be the base of another: http.DefaultTransport replaced
// by one Transport and a second built after it (New takes the default as
// its base), as an SDK that takes only the process-wide transport beside
// one that takes a client leads to. The two must not limit the same
// provider, or every request is booked twice and gets half its limit; and
// the inner one must not report the outer one's requests as sent without
// limits when it has no profile of their provider.

// overTransport reports whether c's base is a Transport, and refuses one
// that limits a provider c limits too.
func overTransport(c *config) (bool, error) {
	inner, ok := c.base.(*Transport)
	if !ok {
		return false, nil
	}
	for i := range c.profiles {
		for j := range inner.profiles {
			if c.profiles[i].Name == inner.profiles[j].Name {
				return false, fmt.Errorf("throttle: WithBase: the base transport is a throttle.Transport that limits %q too "+
					"(http.DefaultTransport replaced by one before this New?): every request would be booked twice, at half its limit; "+
					"use that Transport for this client, or give WithBase the transport it sends with", c.profiles[i].Name)
			}
		}
	}
	return true, nil
}

// limitedKey marks a request's context as limited by a Transport above.
type limitedKey struct{}

// markLimited tells a Transport below that req was limited already.
func markLimited(req *http.Request) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), limitedKey{}, true))
}

// limitedAbove reports whether a Transport above limited req: one no
// profile here matches is then no unprotected request.
func limitedAbove(req *http.Request) bool {
	return req.Context().Value(limitedKey{}) != nil
}

// answering is the caller's base as the layers above it read it: an
// answer or an error, never neither. A base that returns (nil, nil)
// breaks the RoundTripper contract; net/http's Client turns it into an
// error, and every layer here that reads the answer (classification, app
// learning, token sharing) took it for one and panicked.
type answering struct{ base http.RoundTripper }

func (a answering) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(req)
	if resp == nil && err == nil {
		return nil, errNoAnswer
	}
	return resp, err
}

var errNoAnswer = errors.New("throttle: the base RoundTripper returned neither a response nor an error")
