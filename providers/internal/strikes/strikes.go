package strikes

import (
	"sync"
	"time"
)

// Ladder is how successive errors of one scope are penalised.
type Ladder struct {
	// Steps are the lengths of the first penalty, the second, and so on.
	Steps []time.Duration
	// Window is how long after a penalty's end an error still counts as
	// the same incident, so that the next step applies; later, the ladder
	// starts again.
	Window time.Duration
	// Top, when set, gives the end of a penalty past the last step (WeCom:
	// the rest of the day); nil repeats the last step.
	Top func(now time.Time) time.Time
}

// Book remembers the recent penalties of a bounded number of scopes. It is
// safe for concurrent use.
type Book struct {
	mu  sync.Mutex
	max int
	m   map[string]strike
}

type strike struct {
	step  int       // index into Ladder.Steps; len means Top
	until time.Time // end of the penalty given
}

// New returns a Book that remembers at most bound scopes (at least 1).
func New(bound int) *Book { return &Book{max: max(bound, 1), m: make(map[string]strike)} }

// Len is how many scopes the Book remembers.
func (b *Book) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Penalty returns the end of the penalty for an error of scope at now.
//
// An error while the scope's penalty still runs comes from a call sent
// before the penalty was known (calls in flight, other replicas): it is
// the same incident and keeps the same end. One within l.Window after the
// end means the limit outlasted the penalty, so the next step applies.
func (b *Book) Penalty(scope string, now time.Time, l *Ladder) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	top := len(l.Steps) - 1
	if l.Top != nil {
		top = len(l.Steps)
	}
	step := 0
	if prev, ok := b.m[scope]; ok {
		if now.Before(prev.until) {
			return prev.until
		}
		if now.Before(prev.until.Add(l.Window)) {
			step = min(prev.step+1, top)
		}
	} else if len(b.m) >= b.max {
		b.evictLocked(now, l.Window)
	}
	var until time.Time
	if step < len(l.Steps) {
		until = now.Add(l.Steps[step])
	} else {
		until = l.Top(now)
	}
	b.m[scope] = strike{step: step, until: until}
	return until
}

// heardSkew is how far another replica's clock may be ahead of this one's
// as its penalty's end is heard: the shared limiter corrects a larger skew
// (limiter's maxClockSkew, 250 ms), and the rest is slack for the
// announcement's way.
const heardSkew = 500 * time.Millisecond

// Heard records a penalty of scope ending at until that another replica
// gave for an error it met, so that the ladder's next step applies here
// too when the error repeats. Its step is read from its length: the first
// step at least as long as what is left of it at now, less heardSkew (a
// sender's clock a little ahead must not read as the next step: WeCom's
// minute read as its hour, and the next 45009 as the rest of the day), or
// Top's past the last step. One heard late, with less left than its step,
// reads as a lower step, as though not heard. Without Top, a penalty
// longer than the last step is none of the ladder's (an end the provider
// stated) and counts nothing. A strike ending at or after until stays.
func (b *Book) Heard(scope string, until, now time.Time, l *Ladder) {
	if !now.Before(until) || len(l.Steps) == 0 && l.Top == nil {
		return
	}
	left := until.Sub(now) - heardSkew
	step := -1
	for i, d := range l.Steps {
		if d >= left {
			step = i
			break
		}
	}
	if step < 0 {
		if l.Top == nil {
			return
		}
		step = len(l.Steps)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, ok := b.m[scope]
	if ok && !prev.until.Before(until) {
		return
	}
	switch {
	case ok && now.Before(prev.until.Add(l.Window)):
		step = max(step, prev.step) // the same incident, no lower
	case !ok && len(b.m) >= b.max:
		b.evictLocked(now, l.Window)
	}
	b.m[scope] = strike{step: step, until: until}
}

// evictLocked forgets the strikes that can no longer climb and, if none
// has expired, the one that ends first.
func (b *Book) evictLocked(now time.Time, window time.Duration) {
	var oldest string
	var oldestEnd time.Time
	for k, v := range b.m {
		end := v.until.Add(window)
		if !now.Before(end) {
			delete(b.m, k)
			continue
		}
		if oldest == "" || end.Before(oldestEnd) {
			oldest, oldestEnd = k, end
		}
	}
	if len(b.m) >= b.max && oldest != "" {
		delete(b.m, oldest)
	}
}
