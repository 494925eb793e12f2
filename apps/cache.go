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
}

func (b *Book) shard(h tokenHash) *shard { return &b.shards[h[0]%nShards] }

// get returns the live entry of h.
func (b *Book) get(h tokenHash, now uint32) (entry, bool) {
	sh := b.shard(h)
	sh.mu.RLock()
	e, ok := sh.m[h]
	sh.mu.RUnlock()
	if !ok || now >= e.exp {
		return entry{}, false
	}
	return e, true
}

// put stores e under h. When the shard has grown to its sweep mark, expired
// entries go first; when it is still at its share of WithMaxTokens,
// arbitrary ones (Go's map order is random) make room.
func (b *Book) put(h tokenHash, e entry, now uint32) {
	sh := b.shard(h)
	limit := max(1, b.cfg.maxTokens/nShards)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[h]; !ok && len(sh.m) >= min(sh.sweepAt, limit) {
		for k, v := range sh.m {
			if now >= v.exp {
				delete(sh.m, k)
			}
		}
		for k := range sh.m {
			if len(sh.m) < limit {
				break
			}
			delete(sh.m, k)
		}
		sh.sweepAt = max(64, 2*len(sh.m))
	}
	sh.m[h] = e
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
