package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// queueChunks bounds the bytes a link holds per direction (chunks of up to
// chunkSize): past it the proxy stops reading and TCP pushes back on the
// sender, as a congested path would.
const (
	queueChunks = 64
	chunkSize   = 32 << 10
)

// dialTimeout bounds the proxy's own connection to the target.
const dialTimeout = 5 * time.Second

// Proxy forwards loopback TCP connections to a target, with faults switched
// on and off by the test. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	latency atomic.Int64 // one-way delay added to every chunk, in nanoseconds

	mu      sync.Mutex
	gate    chan struct{} // closed while bytes flow; open while stalled
	marker  []byte        // HoldRepliesAfter's; nil: none
	held    chan struct{} // closed by Resume: ends HoldRepliesAfter's hold
	links   map[*link]struct{}
	closed  bool
	running sync.WaitGroup
}

// New listens on a free loopback port and forwards every connection it
// accepts to target (host:port), which is dialled per connection.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, gate: make(chan struct{}), links: map[*link]struct{}{}}
	close(p.gate)
	p.running.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of bytes by d in each direction, so a request
// and its reply take 2d longer. It applies to bytes read from now on; bytes
// keep their order. Zero goes back to forwarding at once.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Stall holds every byte, in both directions and on every connection, old
// and new, until Resume. New connections are still accepted (and the target
// dialled), as when a server or a path freezes without refusing anyone.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already stalled
	}
}

// HoldRepliesAfter holds, until Resume, every byte the target sends on a
// connection from the moment its client sends marker (within one chunk read):
// a server that ran a command and whose reply is lost when the connection
// then fails (ResetAll). Other connections, new ones too, flow as before.
func (p *Proxy) HoldRepliesAfter(marker []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker = marker
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Resume ends a Stall and a HoldRepliesAfter: held bytes are delivered, in
// order.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
	p.marker = nil
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// Release delivers the replies held so far and goes on holding: a
// connection that sends the marker again, one released too, is held again
// until the next Release or Resume. It lets a test hold two calls in turn
// (a command's reply, then that of the command its reply starts).
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = make(chan struct{})
	}
}

func (p *Proxy) gateChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gate
}

// markHeld makes l hold its replies when data carries HoldRepliesAfter's
// marker.
func (p *Proxy) markHeld(l *link, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker != nil && l.held != p.held && bytes.Contains(data, p.marker) {
		l.held = p.held
	}
}

// heldChan is what l's replies wait for: nil when they are not held.
func (p *Proxy) heldChan(l *link) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.held
}

// ResetAll resets every open connection (TCP RST, both to the client and to
// the target), dropping bytes in flight. The proxy keeps accepting new
// connections.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// Conns returns the number of connections being forwarded.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Holding returns the number of open connections whose replies
// HoldRepliesAfter holds now: those that sent its marker since it began or
// since the last Release.
func (p *Proxy) Holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.held != nil && l.held == p.held {
			n++
		}
	}
	return n
}

// Close stops accepting, resets every connection and returns once every
// goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.running.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.running.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		p.running.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.running.Done()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		abort(client)
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, client, server) }()
	go func() { defer pumps.Done(); p.pump(l, server, client) }()
	pumps.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection: the client's and the proxy's own to the
// target.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed when the link is torn down
	held           chan struct{} // replies wait for it (HoldRepliesAfter); under Proxy.mu
	once           sync.Once
}

// reset tears the link down with RST on both sides.
func (l *link) reset() {
	l.once.Do(func() {
		close(l.done)
		abort(l.client)
		abort(l.server)
	})
}

// close tears the link down gracefully, once both directions have ended.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// abort closes c with a TCP RST instead of a FIN: linger 0 discards unsent
// data, which is what a reset is.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

type chunk struct {
	data []byte
	due  time.Time
}

// pump forwards src to dst: a reader stamps each chunk with its due time, and
// this goroutine writes it once due and not stalled. An end of stream is
// passed on as a half-close; any other failure resets the link.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	toClient := dst == l.client
	queue := make(chan chunk, queueChunks)
	readErr := make(chan error, 1)
	reading := make(chan struct{})
	// An early return below follows a reset, which closed src: the reader
	// ends promptly, and Close can count on it having ended.
	defer func() { <-reading }()
	go func() {
		defer close(reading)
		defer close(queue)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{buf[:n], time.Now().Add(time.Duration(p.latency.Load()))}:
				case <-l.done:
					readErr <- nil
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		select {
		case <-p.gateChan():
		case <-l.done:
			return
		}
		if toClient {
			if held := p.heldChan(l); held != nil {
				select {
				case <-held:
				case <-l.done:
					return
				}
			}
		} else {
			p.markHeld(l, c.data)
		}
		if _, err := dst.Write(c.data); err != nil {
			l.reset()
			return
		}
	}
	// The reader has ended and everything it read is delivered.
	if err := <-readErr; err != nil && !errors.Is(err, io.EOF) {
		l.reset()
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
