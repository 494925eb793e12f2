package feishu

import "sync"

// memories keeps, per app (and tenant), the preset that last served it, so
// that a preset rebuilt for a new latency allowance (providers.Headroom)
// keeps what the old one learned: the chats of the messages seen in
// answers, and the levels learned from 99991400s, whose rules are built
// again with the new allowance.
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
	now := p.cfg.Clock()
	o.learned.m.Range(func(api, v any) bool {
		if e := v.(*learnedEntry); now.Before(e.until) {
			p.setLearned(api.(string), e.level, e.until)
		}
		return true
	})
}
