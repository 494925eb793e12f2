package heard

import "sync"

// Queue holds what was heard and not yet confirmed, by key. Make it with
// New; Add from the receiving goroutine, Next from the confirming one.
type Queue[K comparable, V any] struct {
	max  int
	mu   sync.Mutex
	m    map[K]V
	wake chan struct{}
}

// New returns a Queue of at most max keys.
func New[K comparable, V any](max int) *Queue[K, V] {
	return &Queue[K, V]{max: max, m: make(map[K]V), wake: make(chan struct{}, 1)}
}

// Add queues k, its value merged by merge from the queued one (queued
// false: none, and old the zero value). It returns false, queuing nothing,
// when k is not queued and the queue is full.
func (q *Queue[K, V]) Add(k K, merge func(old V, queued bool) V) bool {
	q.mu.Lock()
	old, queued := q.m[k]
	if !queued && len(q.m) >= q.max {
		q.mu.Unlock()
		return false
	}
	q.m[k] = merge(old, queued)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// Next waits until something is queued and takes all of it, or returns
// false once Close was called and the queue is drained.
func (q *Queue[K, V]) Next() (map[K]V, bool) {
	for range q.wake {
		q.mu.Lock()
		batch := q.m
		if len(batch) == 0 {
			q.mu.Unlock()
			continue
		}
		q.m = make(map[K]V, len(batch))
		q.mu.Unlock()
		return batch, true
	}
	return nil, false
}

// Close ends Next's wait once the receiving goroutine stops adding: call it
// from that goroutine, after its last Add.
func (q *Queue[K, V]) Close() { close(q.wake) }
