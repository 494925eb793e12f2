package limiter

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The lean call (reserve.lua's 'q' and 'r' forms): requests of several rule
// sets whose rules are all paced and none capped, the calls coalescing
// makes under load (a batch of one rule set keeps its segment, which the
// hot key's call decides faster).
// Their keys go as keys, and all their numbers in one argument, a
// MessagePack array the script reads in one C call: one Redis argument per
// number made the call's arguments cost Redis and the client as much as
// the decisions (BenchmarkRedisLargestBatch measures a full call).

// allLean reports whether reqs can go in one lean call: every rule paced
// and uncapped.
func allLean(reqs []Request) bool {
	for i := range reqs {
		if !onlyPaced(&reqs[i]) {
			return false
		}
	}
	return true
}

// appendLean builds the lean call of reqs, which share their group: the
// epoch marker, then every penalty and rule key of the requests once, in
// the order first named; then 'q' or 'r' (epoch: whether the marker is
// read at once), the marker's TTL and the packed numbers, which give each
// request's keys by their index. A key named again (the app's rule and
// penalty in every request of a preset) goes once: in a batch of DingTalk
// requests a third of the keys, which Redis would otherwise take as
// arguments, read, and map back to their first index in the script.
func (l *redisLimiter) appendLean(a *scriptArgs, reqs []Request, epoch bool) {
	group := reqs[0].Group
	numbers := 0
	for i := range reqs {
		numbers += 4 + len(reqs[i].Scopes) + 3*len(reqs[i].Rules)
	}
	a.begin(reserveScript, 0)
	a.list = append(a.list, l.keys.get(l.prefix, epochTag, group, ""))
	if a.index == nil {
		a.index = make(map[string]int64)
	}
	a.pack = appendArrayHead(a.pack[:0], numbers)
	markerTTL := int64(time.Second / time.Millisecond)
	for i := range reqs {
		req := &reqs[i]
		waitUs := int64(req.MaxWait / time.Microsecond)
		a.pack = appendUint(a.pack, int64(len(req.Scopes)))
		a.pack = appendUint(a.pack, int64(len(req.Rules)))
		a.pack = appendUint(a.pack, waitUs)
		a.pack = appendUint(a.pack, req.notBefore)
		for _, s := range req.Scopes {
			a.pack = appendUint(a.pack, a.keyIndex(l.keys.get(l.prefix, penaltyTag, group, s)))
		}
		for j := range req.Rules {
			r := core(&req.Rules[j])
			markerTTL = max(markerTTL, pacedTTL(r, waitUs))
			a.pack = appendUint(a.pack, a.keyIndex(l.keys.get(l.prefix, ruleTag, group, req.Rules[j].Key())))
			a.pack = appendUint(a.pack, r.IntervalUs)
			a.pack = appendUint(a.pack, r.ToleranceUs)
		}
	}
	clear(a.index)
	a.list[2] = boxInt(len(a.list) - 3)
	// The pack's bytes go as they are: go-redis writes a []byte argument
	// without copying it into a string.
	a.list = append(a.list, epochMode(epoch), ttlArg(markerTTL), a.pack)
}

// keyIndex is key's index in the call's KEYS (1 for the first, a.list[3]),
// added to them when not named before in this call.
func (a *scriptArgs) keyIndex(key any) int64 {
	k := key.(string)
	if i, ok := a.index[k]; ok {
		return i
	}
	a.list = append(a.list, key)
	i := int64(len(a.list) - 3)
	a.index[k] = i
	return i
}

// maxPacked bounds a packed number: Lua reads numbers as doubles, exact
// up to 2^53 (µs: 285 years, past any wait or time here). Only a rule's
// tolerance can go beyond it (a burst of many periods of years); clamped,
// it makes the lean call stricter than a segment, never looser.
const maxPacked = 1<<53 - 1

// appendArrayHead appends a MessagePack array header of n elements.
func appendArrayHead(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendUint appends n, clamped to [0, maxPacked], as a MessagePack
// unsigned integer in its shortest form.
func appendUint(b []byte, n int64) []byte {
	u := uint64(min(max(n, 0), maxPacked))
	switch {
	case u < 128:
		return append(b, byte(u))
	case u <= math.MaxUint8:
		return append(b, 0xcc, byte(u))
	case u <= math.MaxUint16:
		return append(b, 0xcd, byte(u>>8), byte(u))
	case u <= math.MaxUint32:
		return append(b, 0xce, byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
	}
	return append(b, 0xcf, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32), byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
}

// parseLean reads a lean call's reply into out: the first line, then one
// line per request; a penalised request's line gives the length of the
// stored value it ends with, which may hold a newline.
func parseLean(reqs []Request, reply string, out []Reservation) (flags replyFlags, err error) {
	flags, rest, ok := parseReplyHead(reply)
	if !ok {
		return flags, malformedReply(reply)
	}
	now := time.UnixMicro(flags.now)
	for r := range reqs {
		if rest == "" {
			return flags, malformedReply(reply)
		}
		var line, stored string
		if strings.HasPrefix(rest, "2 ") {
			// "2 <left> <index> <bytes> <stored>"
			var size string
			line, rest = rest, ""
			head := line
			for range 3 {
				_, head, _ = strings.Cut(head, " ")
			}
			size, stored, _ = strings.Cut(head, " ")
			n, err := strconv.Atoi(size)
			if err != nil || n < 0 || n > len(stored) {
				return flags, malformedReply(reply)
			}
			stored, rest = stored[:n], stored[n:]
			if rest != "" {
				if rest[0] != '\n' {
					return flags, malformedReply(reply)
				}
				rest = rest[1:]
			}
			line = line[:len(line)-len(head)]
		} else {
			line, rest, _ = strings.Cut(rest, "\n")
		}
		status, amount, index, fields, ok := parseLineHead(line)
		if !ok {
			return flags, malformedReply(reply)
		}
		if out[r], ok = answer(&reqs[r], now, status, amount, index, fields, stored); !ok {
			return flags, malformedReply(reply)
		}
	}
	if rest != "" {
		return flags, malformedReply(reply)
	}
	return flags, nil
}
