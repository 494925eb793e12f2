package feishu

import "sync"

// memories keeps, per app (and tenant), the preset that last served it, so
// that a preset rebuilt for a new latency allowance (providers.Headroom)
// keeps the chats of the messages the old one saw in answers. (The limits
// learned from 99991400s reach the rebuild through the app set it shares
// them with, appset.Set.ShareKnown.)
type memories struct {
	mu sync.Mutex         // makes taking over a preset's memories one step
	m  map[string]*preset // by AppID (app@tenant for a store app's tenant)
}

// adopt makes p the preset of its app and gives it the chats the app's
// previous preset learned. Presets of one app may be built at once (a
// tenant's first requests), hence the lock.
func (m *memories) adopt(p *preset) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]*preset{}
	}
	if o := m.m[p.cfg.AppID]; o != nil {
		p.messages = o.messages
	}
	m.m[p.cfg.AppID] = p
}
