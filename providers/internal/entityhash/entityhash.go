package entityhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// Hasher names entities under one key. It is safe for concurrent use.
type Hasher struct {
	pool sync.Pool
}

// New returns a Hasher keyed by key, or, when key is empty, by a key
// derived from fallback (the app's or company's ID) under a fixed label.
func New(key, fallback string) *Hasher {
	k := []byte(key)
	if key == "" {
		sum := sha256.Sum256([]byte("throttle entity key\x00" + fallback))
		k = sum[:]
	}
	h := &Hasher{}
	h.pool.New = func() any { return hmac.New(sha256.New, k) }
	return h
}

// Sum returns 24 hex digits (96 bits) naming id in domain (the kind of ID:
// "chat_id", "member", "robot"), so that one ID of two kinds gets two names.
func (h *Hasher) Sum(domain, id string) string {
	m := h.pool.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(domain))
	m.Write([]byte{0})
	m.Write([]byte(id))
	var buf [sha256.Size]byte
	sum := m.Sum(buf[:0])
	h.pool.Put(m)
	return hex.EncodeToString(sum[:12])
}
