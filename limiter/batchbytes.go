package limiter

import (
	"slices"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// The size of a coalesced call, estimated as lane.take fills a batch, so
// that one call stays within maxBatchBytes of keys and arguments.

// argBytes estimates the bytes a request that starts a segment adds to a
// call: its keys, each "{prefix:group}:<tag>:" and its name, the group's
// epoch marker, the segment's own arguments (32 bytes) and each rule's (a
// paced rule's three arguments, a calendar rule's four window starts). A
// request in the same segment as the one before adds segmentBytes: its own
// two arguments. Redis's time for a call follows the same shape: a segment
// costs about as much as a call of its own, a request in it far less.
func (p *Request) argBytes(prefix string) int {
	tag := len(prefix) + len(p.Group) + 6
	n := 32 + tag
	for i := range p.Rules {
		r := core(&p.Rules[i])
		n += tag + len(r.Key) + ruleArgBytes[r.Kind]
		if r.AheadCapped {
			n += 12
		}
	}
	for _, s := range p.Scopes {
		n += tag + len(s)
	}
	return n
}

// ruleArgBytes is about what each kind of rule's arguments take. A paced
// rule's three are counted as the four it had when maxBatchBytes was
// measured against Redis's time per call (docs/design.md, section 6): the
// calls keep that size.
var ruleArgBytes = [...]int{rulecore.Paced: 24, rulecore.Window: 32, rulecore.Concurrency: 40, rulecore.Calendar: 72}

// leanBytes bounds the bytes p adds to a lean call (lean.go) after prev
// (nil: p is the first, which also brings the epoch marker's key and the
// call's three arguments besides the pack): its keys but those prev names
// too (the call carries a key once; the app's rule and penalty beside each
// API's are the common case; a key named further back is counted again,
// so the bound is loose when few rule sets alternate), and its numbers
// packed: four of up to 9 bytes, each penalty key's index (up to 3) and
// per rule its key's index and two numbers (36: with the key's TTL it
// carried when the bound was measured, as ruleArgBytes).
func (p *Request) leanBytes(prefix string, prev *Request) int {
	tag := len(prefix) + len(p.Group) + 6
	n := 36 + 3*len(p.Scopes) + 36*len(p.Rules)
	if prev == nil {
		n += tag + 24
	}
	for i := range p.Rules {
		if k := p.Rules[i].Key(); prev == nil || !prev.namesRule(k) {
			n += tag + len(k)
		}
	}
	for _, s := range p.Scopes {
		if prev == nil || !slices.Contains(prev.Scopes, s) {
			n += tag + len(s)
		}
	}
	return n
}

// namesRule reports whether p has a rule of key k.
func (p *Request) namesRule(k string) bool {
	for i := range p.Rules {
		if p.Rules[i].Key() == k {
			return true
		}
	}
	return false
}

// callBytes estimates the size of the call a batch makes (reserveN): in
// segments, where a request of the shape of the one before adds only its
// own arguments, or, when the batch holds several segments and only paced
// rules, as one lean call, which carries each of its keys once.
type callBytes struct {
	segmented, lean, segments int
	notLean                   bool
}

// with is b once p joins the batch after prev (nil: p is the first).
func (b callBytes) with(p, prev *Request, prefix string) callBytes {
	if prev != nil && prev.sameShape(p) {
		b.segmented += segmentBytes
	} else {
		b.segmented += p.argBytes(prefix)
		b.segments++
	}
	if !b.notLean {
		if b.notLean = !onlyPaced(p); !b.notLean {
			b.lean += p.leanBytes(prefix, prev)
		}
	}
	return b
}

func (b callBytes) size() int {
	if b.segments > 1 && !b.notLean {
		return b.lean
	}
	return b.segmented
}
