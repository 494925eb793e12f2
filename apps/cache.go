package apps

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// nShards spreads the local cache over several locks: the request path
// takes a read lock, exchanges a write lock.
const nShards = 16

// entry is what the cache holds per token: the app's index in Book.ids (0:
// unknown) and the expiry in ticks from Book.epoch. 8 bytes, so that with
// the 16-byte key and the map's own overhead a token costs well under 200
// bytes (BenchmarkMemoryPerToken).
type entry struct {
	app uint32
	exp uint32
}

type shard struct {
	mu      sync.RWMutex
	m       map[tokenHash]entry
	sweepAt int // sweep expired entries when the map reaches this size
	added   int // entries added since the last sweep
}

func (b *Book) shard(h tokenHash) *shard { return &b.shards[h[0]%nShards] }

// get returns what is known of h: found is false when nothing live is,
// and e.app is noApp (nobody knows the token), conflictApp (claimed for two
// apps) or the index of its identity, which app holds.
func (b *Book) get(h tokenHash, now uint32) (app App, e entry, found bool) {
	sh := b.shard(h)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	e, ok := sh.m[h]
	if !ok || now >= e.exp {
		return App{}, entry{}, false
	}
	if e.app != noApp && e.app != conflictApp {
		// Resolved under the shard's lock: the entry holds the identity,
		// so its index cannot be released and reused meanwhile.
		app = b.app(e.app)
	}
	return app, e, true
}

// put stores what is known of h until exp: app when its ID is set, else
// mark (noApp or conflictApp).
func (b *Book) put(h tokenHash, app App, mark uint32, exp, now uint32) {
	sh := b.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b.putLocked(sh, h, app, mark, exp, now)
}

// claim stores that h belongs to app until exp, unless another live entry
// says it belongs to another app: then the token is trusted for neither
// (conflictApp, until the later of the two expiries) and claim reports it.
func (b *Book) claim(h tokenHash, app App, exp, now uint32) (conflict bool) {
	sh := b.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[h]; ok && now < old.exp && old.app != noApp {
		app.Learned = true
		if old.app == conflictApp || b.app(old.app) != app {
			b.putLocked(sh, h, App{}, conflictApp, max(exp, old.exp), now)
			return true
		}
	}
	b.putLocked(sh, h, app, noApp, exp, now)
	return false
}

// putLocked is put with the shard locked. When the shard has grown to its
// sweep mark, or is full and a quarter of its share was added since the
// last sweep, expired entries go; when it is still at its share of
// Config.MaxTokens, an arbitrary one (Go's map order is random) makes room.
// A full shard swept on every new token (before) walked all its entries,
// 65,536 by default, under its lock for each one. Every entry removed or
// replaced releases its identity.
func (b *Book) putLocked(sh *shard, h tokenHash, app App, mark uint32, exp, now uint32) {
	limit := max(1, b.cfg.maxTokens/nShards)
	old, had := sh.m[h]
	if !had {
		sh.added++
		if len(sh.m) >= sh.sweepAt || len(sh.m) >= limit && sh.added >= max(1, limit/4) {
			for k, v := range sh.m {
				if now >= v.exp {
					b.release(v.app)
					delete(sh.m, k)
				}
			}
			sh.sweepAt = max(64, 2*len(sh.m))
			sh.added = 0
		}
		if len(sh.m) >= limit {
			for k, v := range sh.m {
				b.release(v.app)
				delete(sh.m, k)
				if len(sh.m) < limit {
					break
				}
			}
		}
	}
	if app.ID != "" {
		mark = b.acquire(app)
	}
	if had {
		b.release(old.app)
	}
	sh.m[h] = entry{app: mark, exp: exp}
}

// providerAttr is the attribute set of a provider's counters, built once.
func (b *Book) providerAttr(provider string) metric.AddOption {
	if v, ok := attrSets.Load(provider); ok {
		return v.(metric.AddOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attribute.String("provider", provider)))
	attrSets.Store(provider, o)
	return o
}

var attrSets sync.Map // provider name -> metric.AddOption
