package throttle

import (
	"context"
	"sync"
	"time"
)

// Limits of the work done off the request path.
const (
	// backgroundTimeout bounds each give-back, release or penalty write.
	backgroundTimeout = time.Second
	// backgroundQueue bounds the work waiting for a worker; past it the
	// request that brings more does its own, as before, so the queue can
	// never grow without bound when the limiter is slow.
	backgroundQueue = 1024
	// backgroundWorkers bounds the goroutines doing it.
	backgroundWorkers = 4
	// backgroundDrain is how long Close lets queued work finish before it
	// cancels what is left.
	backgroundDrain = 2 * time.Second
)

// background runs the limiter calls a request need not wait for (giving a
// slot back, ending a lease, writing a penalty) on a few goroutines. The
// goroutines start when work arrives and end as soon as the queue is empty,
// so an idle or dropped Transport holds none and nothing leaks without
// Close; Close drains the queue within backgroundDrain.
type background struct {
	ctx    context.Context // cancelled by close after the drain
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []job
	workers int
	closed  bool
	idle    sync.WaitGroup // one count per running worker
}

// job is one call with the request's context values (trace, logger), never
// its cancellation.
type job struct {
	ctx context.Context
	run func(context.Context) error
	// done, when set, receives run's error.
	done func(error)
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{ctx: ctx, cancel: cancel}
}

// do runs fn off the request path, with the values of ctx and a timeout of
// its own. When the queue is full or the Transport closed, it runs fn at
// once on the caller's goroutine instead.
func (b *background) do(ctx context.Context, fn func(context.Context) error, done func(error)) {
	j := job{ctx: context.WithoutCancel(ctx), run: fn, done: done}
	b.mu.Lock()
	if b.closed || len(b.queue) >= backgroundQueue {
		b.mu.Unlock()
		b.run(j, false)
		return
	}
	b.queue = append(b.queue, j)
	if b.workers < backgroundWorkers {
		b.workers++
		b.idle.Add(1)
		go b.work()
	}
	b.mu.Unlock()
}

func (b *background) work() {
	defer b.idle.Done()
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.workers--
			b.queue = nil // let a burst's backing array go
			b.mu.Unlock()
			return
		}
		j := b.queue[0]
		b.queue[0] = job{}
		b.queue = b.queue[1:]
		b.mu.Unlock()
		b.run(j, true)
	}
}

// run runs a job; on a worker, close can cut it short after the drain.
func (b *background) run(j job, worker bool) {
	ctx, cancel := context.WithTimeout(j.ctx, backgroundTimeout)
	if worker {
		stop := context.AfterFunc(b.ctx, cancel)
		defer stop()
	}
	err := j.run(ctx)
	cancel()
	if j.done != nil {
		j.done(err)
	}
}

// close lets the queued work finish for up to drain, then cancels the rest
// and waits for the workers to end. Work arriving later runs on its caller.
func (b *background) close(drain time.Duration) {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	finished := make(chan struct{})
	go func() {
		b.idle.Wait()
		close(finished)
	}()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	select {
	case <-finished:
	case <-timer.C:
		b.cancel()
		<-finished
	}
	b.cancel()
}
