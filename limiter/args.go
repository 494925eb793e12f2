package limiter

import (
	"math/bits"
	"strconv"
	"sync"
)

// Script arguments: keys built once, argument lists reused, numbers boxed
// without allocating where the same few values come back on every call.

// keyCache keeps each Redis key built and boxed once, since the same few
// rules and scopes come back on every request. It is bounded: when full it
// starts over, so keys built from many distinct paths cannot grow it.
type keyCache struct {
	mu sync.RWMutex
	m  map[keyID]any
}

type keyID struct {
	tag         byte
	group, name string
}

const keyCacheMax = 4096

func (c *keyCache) get(prefix string, tag byte, group, name string) any {
	id := keyID{tag, group, name}
	c.mu.RLock()
	k, ok := c.m[id]
	c.mu.RUnlock()
	if ok {
		return k
	}
	k = redisKey(prefix, tag, group, name)
	c.mu.Lock()
	if len(c.m) >= keyCacheMax {
		clear(c.m)
	}
	c.m[id] = k
	c.mu.Unlock()
	return k
}

// scriptArgs is a reusable argument list: go-redis does not keep it once
// the call returns. keys and argv are scratch for a batch of segments,
// whose keys must all come before their arguments; segs holds where each
// segment ends.
type scriptArgs struct {
	list, keys, argv []any
	segs             []int
	pack             []byte           // a lean call's numbers (lean.go)
	index            map[string]int64 // a lean call's keys named so far: their index
}

var argsPool = sync.Pool{New: func() any { return &scriptArgs{list: make([]any, 0, 32)} }}

func (a *scriptArgs) begin(s *script, numKeys int) {
	a.list = append(a.list[:0], evalshaName, s.sha, boxInt(numKeys))
}

// maxPooledArgs bounds the lists kept for reuse: a full batch fits.
const maxPooledArgs = 4096

func (a *scriptArgs) release() {
	if cap(a.list) > maxPooledArgs || cap(a.keys) > maxPooledArgs || cap(a.argv) > maxPooledArgs || cap(a.pack) > maxPooledArgs*8 {
		return
	}
	clear(a.list)
	clear(a.keys)
	clear(a.argv)
	a.list, a.keys, a.argv, a.segs, a.pack = a.list[:0], a.keys[:0], a.argv[:0], a.segs[:0], a.pack[:0]
	argsPool.Put(a)
}

var smallInts = func() (out [16]any) {
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func boxInt(n int) any { return boxInt64(int64(n)) }

func boxInt64(n int64) any {
	if n >= 0 && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
}

var emptyArg any = ""

// ttlArg boxes the epoch marker's TTL in milliseconds for the lean call and
// one.lua (a paced key's TTL is the script's own: tat_px). A TTL may run
// longer than needed (the marker then outlives the state a little), so
// values above a second are rounded up to an eighth of their power of two,
// which leaves few distinct strings to format once and keep.
func ttlArg(ms int64) any {
	if ms > 1024 {
		shift := bits.Len64(uint64(ms)) - 4
		ms = (ms + 1<<shift - 1) >> shift << shift
	}
	ttlCache.mu.RLock()
	v, ok := ttlCache.m[ms]
	ttlCache.mu.RUnlock()
	if ok {
		return v
	}
	v = strconv.FormatInt(ms, 10)
	ttlCache.mu.Lock()
	ttlCache.m[ms] = v
	ttlCache.mu.Unlock()
	return v
}

// ttlCache holds at most 1024 exact values and eight per power of two above.
var ttlCache = struct {
	mu sync.RWMutex
	m  map[int64]any
}{m: make(map[int64]any)}

var boxedPaced, boxedCalendar, boxedConcurrency, boxedWindow any = "p", "c", "k", "w"

// epochMode leads a lean call's arguments and one.lua's: 'q' when the
// script is to read the group's epoch marker at once (the replica has slots
// booked ahead in the group, which a loss of the state would let others
// overlap), else 'r': read only once a request is not admitted at once,
// since a loss of the state costs a slot booked at once nothing, and the
// common call (no load, no wait) then neither reads, renews nor returns it.
func epochMode(atOnce bool) any {
	if atOnce {
		return epochAtOnce
	}
	return epochLazy
}

var epochAtOnce, epochLazy any = "q", "r"

// markerArg is reserve.lua's ARGV[2] with the epoch marker: "<n>e<ms>",
// n penalty keys (the last one the marker) kept for ms; ms is rounded up
// as ttlArg does, so few distinct strings are formatted once and kept.
func markerArg(n int, ms int64) any {
	if ms > 1024 {
		shift := bits.Len64(uint64(ms)) - 4
		ms = (ms + 1<<shift - 1) >> shift << shift
	}
	id := markerID{n, ms}
	markerCache.mu.RLock()
	v, ok := markerCache.m[id]
	markerCache.mu.RUnlock()
	if ok {
		return v
	}
	v = strconv.Itoa(n) + "e" + strconv.FormatInt(ms, 10)
	markerCache.mu.Lock()
	if len(markerCache.m) >= keyCacheMax {
		clear(markerCache.m)
	}
	markerCache.m[id] = v
	markerCache.mu.Unlock()
	return v
}

type markerID struct {
	n  int
	ms int64
}

var markerCache = struct {
	mu sync.RWMutex
	m  map[markerID]any
}{m: make(map[markerID]any)}
