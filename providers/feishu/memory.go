package feishu

import "sync"

// memories keeps, per app (and tenant), the preset that last served it, so
// that a preset rebuilt for a new latency allowance (providers.Headroom)
// keeps what the old one learned: the chats of the messages seen in
// answers, and the limits learned from 99991400s, applied to the new
// preset's own table (so never above its config) with its allowance.
type memories struct {
	mu sync.Mutex         // makes taking over a preset's memories one step
	m  map[string]*preset // by AppID (app@tenant for a store app's tenant)
}

// adopt makes p the preset of its app and gives it what the app's previous
// preset learned. Presets of one app may be built at once (a tenant's
// first requests), hence the lock.
func (m *memories) adopt(p *preset) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]*preset{}
	}
	o := m.m[p.cfg.AppID]
	m.m[p.cfg.AppID] = p
	if o == nil {
		return
	}
	p.messages = o.messages
	o.learned.m.Range(func(_, v any) bool {
		for _, l := range v.(*learnedEntry).from {
			p.lower(l) // against p's own table: never above its config
		}
		return true
	})
}
