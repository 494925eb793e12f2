package limiter

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Waking at the slot. A Go timer fires up to a millisecond late on Linux
// (the runtime's poller waits in whole milliseconds), which is 2% of a
// 20/s rule's interval and the larger part of how late a booked send goes
// out. So a wait runs on a timer until the last stretch, and one thread
// sleeps the rest in short system-level sleeps (precise to tens of
// microseconds) and wakes each waiter at its instant. Waiters never wake
// early. The cost: while some wait is in its last stretch, that thread
// wakes every fineStep or so (a few thousand system calls a second at
// most, whatever the number of waiters).

// fineStretch is how much of a wait the fine waker takes over: more than
// the timer's own lateness, so the timer always fires before the instant.
const fineStretch = 2 * time.Millisecond

// fineStep bounds each system-level sleep of the waker, so that a waiter
// that arrives with an earlier instant is noticed soon.
const fineStep = 200 * time.Microsecond

// fineIdle is how long the waker's thread stays without waiters before it
// ends (it starts again with the next one).
const fineIdle = time.Second

func sleepFor(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	at := time.Now().Add(d)
	if coarse := d - fineStretch; coarse > 0 {
		t := time.NewTimer(coarse)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	if time.Until(at) <= 0 {
		return nil
	}
	done := waker.add(at)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// fineWaker wakes waiters at their instants from one goroutine, which
// sleeps in nanosleep (holding its thread in the system call) while a
// waiter is in its last stretch and ends once none has been for fineIdle.
type fineWaker struct {
	mu      sync.Mutex
	waiters wakeHeap
	running bool
	kick    chan struct{}
}

var waker = &fineWaker{kick: make(chan struct{}, 1)}

type wakeAt struct {
	at   time.Time
	done chan struct{}
}

type wakeHeap []wakeAt

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wakeAt)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = wakeAt{}
	*h = old[:len(old)-1]
	return x
}

// add registers a waiter; done is closed at or after at.
func (w *fineWaker) add(at time.Time) <-chan struct{} {
	done := make(chan struct{})
	w.mu.Lock()
	heap.Push(&w.waiters, wakeAt{at, done})
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.run()
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return done
}

func (w *fineWaker) run() {
	idle := time.NewTimer(fineIdle)
	defer idle.Stop()
	for {
		w.mu.Lock()
		if len(w.waiters) == 0 {
			w.mu.Unlock()
			idle.Reset(fineIdle)
			select {
			case <-w.kick:
				continue
			case <-idle.C:
				w.mu.Lock()
				if len(w.waiters) == 0 {
					w.running = false
					w.mu.Unlock()
					return
				}
				w.mu.Unlock()
				continue
			}
		}
		next := w.waiters[0]
		if wait := time.Until(next.at); wait > 0 {
			w.mu.Unlock()
			fineSleep(min(wait, fineStep))
			continue
		}
		heap.Pop(&w.waiters)
		w.mu.Unlock()
		close(next.done)
	}
}
