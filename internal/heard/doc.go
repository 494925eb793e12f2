// Package heard is the queue between hearing an announcement on a Redis
// channel and confirming it against Redis, shared by the penalty watch
// (package limiter) and the app book (package apps).
//
// An announcement is a hint: whoever can publish on the channel can send
// anything, so a listener believes only what Redis holds. Messages arrive
// faster than one read each would allow, so the listener queues what it
// heard (one entry per key: messages naming the same key merge and cost
// one read) and a confirming goroutine takes the whole queue at once and
// reads it in one round trip. The queue is bounded: a message past the
// bound is dropped (the listener counts it), which loses only the
// speed-up, since Redis still holds the truth for the next request.
package heard
