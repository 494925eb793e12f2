package apps

// Interned identities: a cache entry holds a 4-byte index instead of three
// strings. Each identity counts the entries that hold it and is released
// when none does, so identities heard once (or forged) do not stay in
// memory after their entries expire or are evicted.

// Reserved indexes: no identity.
const (
	// noApp marks a token nobody knows.
	noApp uint32 = 0
	// conflictApp marks a token claimed for two apps: trusted for neither.
	conflictApp uint32 = ^uint32(0)
)

type idSlot struct {
	app  App
	refs int
}

// acquire returns the index of app, adding it when new, and counts one
// more entry holding it. Called with the entry's shard locked.
func (b *Book) acquire(app App) uint32 {
	app.Learned = true
	b.idMu.Lock()
	defer b.idMu.Unlock()
	if i, ok := b.idIdx[app]; ok {
		b.ids[i].refs++
		return i
	}
	var i uint32
	if n := len(b.idFree); n > 0 {
		i, b.idFree = b.idFree[n-1], b.idFree[:n-1]
		b.ids[i] = idSlot{app: app, refs: 1}
	} else {
		i = uint32(len(b.ids))
		b.ids = append(b.ids, idSlot{app: app, refs: 1})
	}
	b.idIdx[app] = i
	return i
}

// release counts one entry fewer holding index i, and frees the identity
// when it was the last. Called with the entry's shard locked, so no reader
// of that entry can be resolving i meanwhile.
func (b *Book) release(i uint32) {
	if i == noApp || i == conflictApp {
		return
	}
	b.idMu.Lock()
	defer b.idMu.Unlock()
	s := &b.ids[i]
	if s.refs--; s.refs > 0 {
		return
	}
	delete(b.idIdx, s.app)
	*s = idSlot{}
	b.idFree = append(b.idFree, i)
}

// app returns the identity at index i; the caller holds the shard of an
// entry that holds i.
func (b *Book) app(i uint32) App {
	b.idMu.RLock()
	defer b.idMu.RUnlock()
	return b.ids[i].app
}

// interned is how many identities are held.
func (b *Book) interned() int {
	b.idMu.RLock()
	defer b.idMu.RUnlock()
	return len(b.idIdx)
}
