package limiter

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The segments of a reserve call (reserve.lua): one per run of consecutive
// requests with the same rules and scopes, several in one call when
// requests of one group coalesce (coalesce.go).

// appendBatch builds a call of several segments (reserve.lua's 'm' form):
// every segment's keys, then "m <segments>" and, per segment, its counts
// of keys and arguments and its arguments. Only the first segment reads
// and renews the group's epoch marker, for as long as any segment needs:
// one read of it answers for the whole call.
func (l *redisLimiter) appendBatch(a *scriptArgs, reqs []Request) {
	a.argv = append(a.argv, batchArg, boxInt(len(a.segs)))
	start, marker := 0, 0
	var markerTTL int64
	for _, end := range a.segs {
		first := start == 0
		nk, na := len(a.keys), len(a.argv)
		a.keys = l.appendSegmentKeys(a.keys, &reqs[start], first)
		a.argv = append(a.argv, nil, nil)
		if first {
			marker = len(a.argv) + 1 // the segment's ARGV[2]
		}
		var ttl int64
		a.argv, ttl = appendSegmentArgs(a.argv, reqs[start:end], first)
		markerTTL = max(markerTTL, ttl)
		a.argv[na] = boxInt(len(a.keys) - nk)
		a.argv[na+1] = boxInt(len(a.argv) - na - 2)
		start = end
	}
	a.argv[marker] = markerArg(len(reqs[0].Scopes)+1, markerTTL)
	a.begin(reserveScript, len(a.keys))
	a.list = append(a.list, a.keys...)
	a.list = append(a.list, a.argv...)
}

// appendSegmentEnds appends where each segment of reqs ends: each run of
// consecutive requests with the same rules and scopes is one segment.
func appendSegmentEnds(ends []int, reqs []Request) []int {
	for i := 1; i <= len(reqs); i++ {
		if i == len(reqs) || !reqs[i-1].sameShape(&reqs[i]) {
			ends = append(ends, i)
		}
	}
	return ends
}

var batchArg any = "m"

// appendSegment builds the call of reqs, which share their rules and
// scopes, as one segment: its keys, the epoch marker among them, then its
// arguments.
func (l *redisLimiter) appendSegment(a *scriptArgs, reqs []Request) {
	req := &reqs[0]
	a.begin(reserveScript, len(req.Scopes)+1+len(req.Rules))
	a.list = l.appendSegmentKeys(a.list, req, true)
	a.list, _ = appendSegmentArgs(a.list, reqs, true)
}

// appendSegmentKeys appends the keys of one segment: the penalty keys, the
// epoch marker (with marker), one key per rule.
func (l *redisLimiter) appendSegmentKeys(list []any, req *Request, marker bool) []any {
	for _, s := range req.Scopes {
		list = append(list, l.keys.get(l.prefix, penaltyTag, req.Group, s))
	}
	if marker {
		list = append(list, l.keys.get(l.prefix, epochTag, req.Group, ""))
	}
	for i := range req.Rules {
		list = append(list, l.keys.get(l.prefix, ruleTag, req.Group, req.Rules[i].Key()))
	}
	return list
}

// appendSegmentArgs appends the arguments of one segment, whose requests
// share their rules and scopes (see reserve.lua), and returns how long the
// epoch marker must live for them (ms).
func appendSegmentArgs(list []any, reqs []Request, marker bool) (_ []any, markerTTL int64) {
	req := &reqs[0]
	list = append(list, boxInt(len(reqs)), nil) // the penalty keys' count, below
	counts := len(list) - 1
	var waitUs int64
	for i := range reqs {
		w := int64(reqs[i].MaxWait / time.Microsecond)
		waitUs = max(waitUs, w)
		list = append(list, boxInt64(w), boxInt64(reqs[i].notBefore))
	}
	list, markerTTL = appendRuleArgs(list, req, waitUs)
	if marker {
		list[counts] = markerArg(len(req.Scopes)+1, markerTTL)
	} else {
		list[counts] = boxInt(len(req.Scopes))
	}
	return list, markerTTL
}

// parseSegments reads the reply of a call into out: with one segment the
// script's reply, with several each segment's reply led by its length.
// The flags are the first segment's (the one that read the epoch marker),
// corrupt if any segment found a corrupt value.
func parseSegments(reqs []Request, segs []int, reply string, out []Reservation) (flags replyFlags, err error) {
	if len(segs) == 1 {
		return parseReserve(reqs, reply, out)
	}
	start, rest := 0, reply
	for _, end := range segs {
		size, r, _ := strings.Cut(rest, "\n")
		n, err := strconv.Atoi(size)
		if err != nil || n < 0 || n > len(r) {
			return flags, fmt.Errorf("%w: reserve: malformed batch reply %q", ErrUnavailable, reply)
		}
		f, err := parseReserve(reqs[start:end], r[:n], out[start:end])
		if err != nil {
			return flags, err
		}
		if start == 0 {
			flags = f
		}
		flags.corrupt = flags.corrupt || f.corrupt
		start, rest = end, r[n:]
	}
	return flags, nil
}

// maxClockSkew is how far this replica's clock may be from Redis's before
// an end read on one is moved to the other (penalize.lua uses the same
// bound the other way): below it the difference is the call's own time,
// and an end stays exactly as stored.
const maxClockSkew = 250 * time.Millisecond

// skewBeyondBound is how far Redis's clock (redisNow) is ahead of this
// replica's (local, read at the same moment), or 0 within maxClockSkew.
func skewBeyondBound(redisNow, local time.Time) time.Duration {
	skew := redisNow.Sub(local)
	if skew <= maxClockSkew && skew >= -maxClockSkew {
		return 0
	}
	return skew
}

// maxStoredUs bounds the times the scripts read (state.lua's most): a
// stored end past it is no state of ours and reads as corrupt.
const maxStoredUs = 1e18

// settle notes what a call's reply says of the group's state (penalties,
// a lost state, corrupt values) and stamps every answer.
func (l *redisLimiter) settle(reqs []Request, out []Reservation, flags replyFlags, known epochState, answered time.Time) {
	group := reqs[0].Group
	// The latest slot booked, by this replica or (as the rules' state
	// shows, refusals included) by any.
	var horizon int64
	for i := range out {
		horizon = max(horizon, fleetHorizon(&reqs[i], &out[i]))
	}
	// A penalty's end came on Redis's clock; this replica's breakers read
	// it on its own.
	if skew := skewBeyondBound(time.UnixMicro(flags.now), answered); skew != 0 {
		var last *Penalty
		for i := range out {
			if p := out[i].penalty; p != nil && p != last {
				p.Until = p.Until.Add(-skew)
				last = p
			}
		}
	}
	if l.onPenalty != nil {
		var last *Penalty
		for i := range out {
			// A penalty refuses a whole segment: tell it once.
			if p := out[i].penalty; p != nil && (last == nil || *p != *last) {
				l.onPenalty(group, *p)
				last = p
			}
		}
	}
	var lost, first bool
	if flags.epoch > 0 {
		lost, first = l.noteEpoch(group, known, flags.epoch, flags.now, horizon)
	}
	for i := range out {
		out[i].answered = answered
		out[i].lost = lost
	}
	if l.report != nil {
		if first {
			l.report(event{Kind: eventStateLost, Group: group,
				Detail: "the group's epoch marker changed: Redis lost its state (FLUSHALL, eviction, a restart without persistence)"})
		}
		if flags.corrupt {
			l.report(event{Kind: eventCorruptValue, Group: group, Detail: "a key of the group held a value that is not its state; it was replaced"})
		}
	}
}
