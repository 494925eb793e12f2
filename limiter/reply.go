package limiter

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// What a reserve call's reply says (reserve.lua): each request's answer,
// read without allocating beyond the Reservations' own fields, and the
// group's epoch, by which a replica learns that Redis lost the state.

// bookedAhead reports whether this replica may have slots of group booked
// ahead of now (known is what it knows of the group; the horizon is on
// Redis's clock, so a slot up to maxClockSkew past still counts): then a
// loss of the state could let new slots overlap them, and every call
// reads the epoch.
func bookedAhead(known epochState, now time.Time) bool {
	return known.horizon > now.Add(-maxClockSkew).UnixMicro()
}

// epochOf returns what this replica knows of group's state.
func (l *redisLimiter) epochOf(group string) epochState {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	return l.epochs[group]
}

// noteEpoch records the epoch a reply carried for group (and the latest
// slot it booked, horizon). The state was lost for this call when the
// epoch is newer than the one known when it was sent (known) while a slot
// this replica booked under that one was still ahead (now, on Redis's
// clock), so new slots could overlap it. A newer epoch with nothing ahead
// is an idle group whose keys all expired; an older one is a reply a newer
// one overtook. first is true once per lost epoch, to report it once.
func (l *redisLimiter) noteEpoch(group string, known epochState, epoch, now, horizon int64) (lost, first bool) {
	lost = known.epoch != 0 && epoch > known.epoch && known.horizon > now
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	st, ok := l.epochs[group]
	if !ok && len(l.epochs) >= keyCacheMax {
		clear(l.epochs) // forgetting only misses a loss, never invents one
	}
	if epoch > st.epoch {
		st.epoch = epoch
	}
	if lost && st.reported < epoch {
		st.reported, first = epoch, true
	}
	st.horizon = max(st.horizon, horizon)
	l.epochs[group] = st
	return lost, first
}

// epochState is what a replica knows of a group's state in Redis.
type epochState struct{ epoch, horizon, reported int64 }

// replyFlags are what the reply's first line says beyond the time.
type replyFlags struct {
	now     int64 // Redis's clock (µs)
	epoch   int64 // the group's epoch (µs), 0 if absent
	corrupt bool  // a corrupt value was found and replaced
}

// malformedReply is the error for a reserve reply that does not read as
// the script writes it.
func malformedReply(reply string) error {
	return fmt.Errorf("%w: reserve: malformed reply %q", ErrUnavailable, reply)
}

// parseReserve reads the script's reply (see reserve.lua) into out without
// allocating beyond the Reservations' own fields.
func parseReserve(reqs []Request, reply string, out []Reservation) (flags replyFlags, err error) {
	flags, rest, ok := parseReplyHead(reply)
	if !ok {
		return flags, malformedReply(reply)
	}
	now := time.UnixMicro(flags.now)
	var line string
	penalised := false
	for r := range reqs {
		// A penalty refuses every request of the call: its line comes once.
		if !penalised {
			if rest == "" {
				return flags, malformedReply(reply)
			}
			line, rest, _ = strings.Cut(rest, "\n")
		}
		status, amount, index, fields, ok := parseLineHead(line)
		if !ok {
			return flags, malformedReply(reply)
		}
		// The stored value of a penalty ends the reply; it is "end|code".
		stored := fields
		if status == 2 {
			penalised = true
			if rest != "" {
				stored += "\n" + rest
			}
		}
		if out[r], ok = answer(&reqs[r], now, status, amount, index, fields, stored); !ok {
			return flags, malformedReply(reply)
		}
	}
	return flags, nil
}

// parseLineHead reads the three numbers that lead a request's line:
// its status, an amount (µs) and a rule or penalty key index; fields is
// the rest of the line.
func parseLineHead(line string) (status, amount, index int64, fields string, ok bool) {
	var head [3]int64
	fields = line
	for i := range head {
		var field string
		field, fields, _ = strings.Cut(fields, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, 0, 0, "", false
		}
		head[i] = n
	}
	return head[0], head[1], head[2], fields, true
}

// answer is the Reservation a request's line gives: admitted (0) with the
// state each rule moved to in fields, refused (1) with the fleet's states,
// or penalised (2) by the penalty key index whose value is stored.
func answer(req *Request, now time.Time, status, amount, index int64, fields, stored string) (Reservation, bool) {
	res := Reservation{ruleIndex: int(index) - 1, now: now}
	// A stored penalty end can be anything a hostile or garbled writer
	// put there: cap the wait so that the nanosecond Duration cannot
	// overflow into the past (the Transport clamps it further to the
	// profile's MaxPenalty), and never below zero.
	d := time.Duration(min(max(amount, 0), maxReplyMicros)) * time.Microsecond
	switch status {
	case 0:
		res.ok, res.delay = true, d
		var ok bool
		if res.booked, ok = parseBooked(fields, len(req.Rules)); !ok {
			return res, false
		}
	case 1:
		res.retryAfter = d
		// What the fleet booked (see reserve.lua), when the reply says:
		// checked here, kept as the reply's text (refusals are the hot
		// key's common answer, and a slice would cost an allocation).
		if fields != "" && len(req.Rules) > 0 {
			var buf [4]int64
			if len(res.withFleet(fields).states(buf[:0], len(req.Rules))) != len(req.Rules) {
				return res, false
			}
		}
	case 2:
		res.retryAfter, res.ruleIndex = d, -1
		if int(index) < 1 || int(index) > len(req.Scopes) {
			return res, false // the scripts name one of the request's penalty keys
		}
		p := &Penalty{Until: now.Add(d), Scope: req.Scopes[index-1]}
		if _, code, found := strings.Cut(stored, "|"); found {
			p.Code = capCode(code)
		}
		res.penalty = p
	default:
		return res, false
	}
	return res, true
}

// maxCodeLen bounds a penalty's code as read from Redis: a provider's code
// is a few bytes, and a value written by hand must not travel into every
// breaker, error and log line whole (state.lua sends at most 256 bytes of
// the value).
const maxCodeLen = 128

// capCode is code cut to maxCodeLen bytes.
func capCode(code string) string {
	if len(code) > maxCodeLen {
		return code[:maxCodeLen]
	}
	return code
}

// parseBooked reads the state each of n rules moved to, from an admitted
// line's fields; nil when n is 0.
func parseBooked(fields string, n int) ([]int64, bool) {
	if n == 0 {
		return nil, true
	}
	booked := make([]int64, n)
	for i := range booked {
		var field string
		field, fields, _ = strings.Cut(fields, " ")
		b, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return nil, false
		}
		booked[i] = b
	}
	return booked, true
}

// parseReplyHead reads a reserve reply's first line, "<sec> <µs>[ c][
// e<epoch>]": Redis's time, whether a corrupt value was replaced, and the
// group's epoch. rest is the reply after it.
func parseReplyHead(reply string) (flags replyFlags, rest string, ok bool) {
	line, rest, _ := strings.Cut(reply, "\n")
	secs, line, _ := strings.Cut(line, " ")
	usecs, line, _ := strings.Cut(line, " ")
	sec, err1 := strconv.ParseInt(secs, 10, 64)
	usec, err2 := strconv.ParseInt(usecs, 10, 64)
	if err1 != nil || err2 != nil {
		return flags, rest, false
	}
	for line != "" {
		var field string
		field, line, _ = strings.Cut(line, " ")
		switch {
		case field == "c":
			flags.corrupt = true
		case strings.HasPrefix(field, "e"):
			flags.epoch, _ = strconv.ParseInt(field[1:], 10, 64)
		}
	}
	flags.now = sec*1e6 + usec
	return flags, rest, true
}

// maxReplyMicros caps a wait or penalty read from a reply: 100 years, far
// below the ~292 years a time.Duration holds.
const maxReplyMicros = 100 * 365 * 24 * int64(time.Hour/time.Microsecond)
