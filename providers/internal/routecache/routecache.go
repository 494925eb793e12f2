package routecache

import (
	"sync"
	"sync/atomic"

	"github.com/quotaware/throttle/providers"
)

// maxRoutes bounds a cache: the catalogs bound the APIs, but ISV orgs and
// many apps multiply them; past it, routes are built per request.
const maxRoutes = 4096

// Cache is a bounded, concurrent cache of routes by key. The zero value is
// ready to use. Cached routes share their slices, capped so that an append
// copies them: they must not be modified in place.
type Cache struct {
	m sync.Map // key -> *providers.Route
	n atomic.Int64
}

// Get returns the route cached under key, or builds it with build and
// keeps it while the cache has room. A build that fails is not kept.
func (c *Cache) Get(key string, build func() (providers.Route, error)) (providers.Route, error) {
	if r, ok := c.m.Load(key); ok {
		return *r.(*providers.Route), nil
	}
	r, err := build()
	if err != nil {
		return providers.Route{}, err
	}
	r.Rules, r.Scopes = r.Rules[:len(r.Rules):len(r.Rules)], r.Scopes[:len(r.Scopes):len(r.Scopes)]
	// Take a place before storing, so that concurrent builds cannot pass
	// the bound together; give it back when another kept the key first.
	if c.n.Add(1) > maxRoutes {
		c.n.Add(-1)
	} else if _, loaded := c.m.LoadOrStore(key, &r); loaded {
		c.n.Add(-1)
	}
	return r, nil
}
