// Package faultproxy is a TCP proxy for tests that sits between a client and
// a server (Redis, in this module) and misbehaves on command: it adds
// latency, stalls (accepts connections and holds every byte, as a partition
// or a frozen server would), holds the replies of the connection that sent a
// marked command (the server ran it; a reset then loses its reply), resets
// every connection, and goes back to normal.
//
// A killed server answers at once with "connection refused"; the failures
// that hang callers are the slow and the silent ones. The proxy makes those
// reproducible, so tests can prove that a caller's deadline trips its
// fallback instead of waiting forever:
//
//	p, err := faultproxy.New(redisAddr)
//	...
//	defer p.Close()
//	client := redis.NewClient(&redis.Options{Addr: p.Addr()})
//	p.Stall()  // every call now waits for its deadline
//	p.Resume() // held bytes flow again
//
// The proxy only ever listens on loopback.
package faultproxy
