package limiter

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// one.lua, the call of one request of paced rules, decides exactly as
// reserve.lua's general loop does for the same request (ARGV[1] "1"): over
// random states of the keys (absent, past, ahead, corrupt; a penalty or
// none; the epoch marker fresh, old or absent) and random requests, both
// give the same reply and leave the same values, each on its own copy of
// the state. The scripts run on a fixed clock (their TIME call replaced),
// so that the two calls see the same instant.
func TestOneMatchesReserve(t *testing.T) {
	f := newFixedClock(t)
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[byte]int{} // replies by status: admitted, refused, penalised
	for iter := range 400 {
		nr := 1 + rng.IntN(3)
		var rules []rule.Rule
		for i := range nr {
			rules = append(rules, rule.Must(rule.New("r"+strconv.Itoa(i), 3+rng.IntN(50), time.Second,
				rule.WithBurst(1+rng.IntN(3)))))
		}
		var scopes []string
		for i := range rng.IntN(3) {
			scopes = append(scopes, "s"+strconv.Itoa(i))
		}
		req := Request{Rules: rules, Scopes: scopes, MaxWait: time.Duration(rng.IntN(3)) * 50 * time.Millisecond}
		if rng.IntN(4) == 0 {
			req.notBefore = fixedNow + int64(rng.IntN(200_000))
		}
		if !onlyPaced(&req) {
			t.Fatal("the rules are paced")
		}
		var replies [2]string
		var states [2][]string
		for v := range 2 {
			req := req
			req.Group = fmt.Sprintf("g%d-%d", iter, v)
			a := &scriptArgs{}
			if v == 0 {
				f.l.appendOne(a, []Request{req}, true)
			} else {
				f.l.appendSegment(a, []Request{req})
			}
			replies[v], states[v] = f.run(a.list, uint64(iter))
		}
		if replies[0] != replies[1] {
			t.Fatalf("case %d: one.lua %q, reserve.lua %q", iter, replies[0], replies[1])
		}
		if fmt.Sprint(states[0]) != fmt.Sprint(states[1]) {
			t.Fatalf("case %d: states %v and %v", iter, states[0], states[1])
		}
		seen[replies[0][strings.Index(replies[0], "\n")+1]]++

		// With the marker lazy (one.lua's 'r'), the same but for the epoch,
		// read only when the request waits or is refused for its wait.
		lazyReq := req
		lazyReq.Group = fmt.Sprintf("g%d-lazy", iter)
		a := &scriptArgs{}
		f.l.appendOne(a, []Request{lazyReq}, false)
		lazy, lazyStates := f.run(a.list, uint64(iter))
		want := replies[1]
		if line := want[strings.Index(want, "\n")+1:]; strings.HasPrefix(line, "0 0 ") || strings.HasPrefix(line, "2 ") {
			head, rest, _ := strings.Cut(want, "\n")
			var kept []string
			for _, field := range strings.Fields(head) {
				if !strings.HasPrefix(field, "e") {
					kept = append(kept, field)
				}
			}
			want = strings.Join(kept, " ") + "\n" + rest
			seen['l']++
		}
		if lazy != want || fmt.Sprint(lazyStates) != fmt.Sprint(states[1]) {
			t.Fatalf("case %d: lazy marker %q (states %v), want %q (states %v)", iter, lazy, lazyStates, want, states[1])
		}
	}
	if seen['0'] == 0 || seen['1'] == 0 || seen['2'] == 0 || seen['l'] == 0 {
		t.Fatalf("replies by status %v: the cases did not admit, refuse and penalise each", seen)
	}
}

// randomBatch draws n requests of paced rules of one group-to-be, some
// sharing rule keys and penalty scopes, some repeating the one before (a
// segment of several), some with "no slot before".
func randomBatch(rng *rand.Rand, n int) []Request {
	var reqs []Request
	for range n {
		if len(reqs) > 0 && rng.IntN(4) == 0 {
			reqs = append(reqs, reqs[len(reqs)-1]) // a segment of several
			continue
		}
		var req Request
		for _, i := range rng.Perm(4)[:1+rng.IntN(3)] {
			req.Rules = append(req.Rules, rule.Must(rule.New("r"+strconv.Itoa(i), 3+i*7, time.Second, rule.WithBurst(1+i%3))))
		}
		for _, i := range rng.Perm(3)[:rng.IntN(3)] {
			req.Scopes = append(req.Scopes, "s"+strconv.Itoa(i))
		}
		req.MaxWait = time.Duration(rng.IntN(3)) * 50 * time.Millisecond
		if rng.IntN(4) == 0 {
			req.notBefore = fixedNow + int64(rng.IntN(200_000))
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// fixedNow is the instant the script reads on a fixedClock, in µs.
const fixedNow = int64(1764000000_500000)

// fixedClock runs reserve.lua (sha) and one.lua (oneSHA) with their TIME
// call replaced by fixedNow, so that two calls compared see the same
// instant, on a redis-server of the test's own.
type fixedClock struct {
	t           *testing.T
	c           *redis.Client
	l           *redisLimiter
	sha, oneSHA string
}

func newFixedClock(t *testing.T) *fixedClock {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l, err := newRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixedClock{t: t, c: c, l: l}
	const clock = "local t = redis.call('TIME')"
	for _, s := range []struct {
		src string
		sha *string
	}{{reserveSource, &f.sha}, {oneSource, &f.oneSHA}} {
		if !strings.Contains(s.src, clock) {
			t.Fatal("a script no longer reads the time as this test expects")
		}
		src := strings.Replace(s.src, clock, "local t = {'1764000000', '500000'}", 1)
		if *s.sha, err = c.ScriptLoad(context.Background(), src).Result(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// run stores a state drawn from seed (randomState, the same for the same
// seed and keys) in every key of call, an "evalsha <sha> <numkeys>
// keys... args..." whose SHA it makes the fixed clock's (one.lua's when
// the call is to one.lua, else reserve.lua's), runs it and returns its
// reply and the values it left in the rule keys ("<name>=<value>", by
// name).
func (f *fixedClock) run(call []any, seed uint64) (reply string, states []string) {
	ctx := context.Background()
	if call[1] != f.oneSHA && call[1] != oneScript.sha {
		call[1] = f.sha
	} else {
		call[1] = f.oneSHA
	}
	numKeys, _ := strconv.Atoi(fmt.Sprint(call[2]))
	var ruleKeys []string
	for _, k := range call[3 : 3+numKeys] {
		key := k.(string)
		// Drawn by the key's name within its group, so that calls of
		// two groups laid out differently see the same state.
		_, name, _ := strings.Cut(key, "}")
		h := fnv.New64a()
		h.Write([]byte(name))
		r := rand.New(rand.NewPCG(seed, h.Sum64()))
		if strings.Contains(key, "}:r:") {
			ruleKeys = append(ruleKeys, key)
		}
		if val := randomState(r, key, fixedNow); val != "" {
			if err := f.c.Set(ctx, key, val, time.Minute).Err(); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	reply, err := f.c.Do(ctx, call...).Text()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, k := range ruleKeys {
		s, err := f.c.Get(ctx, k).Result()
		if err != nil && err != redis.Nil {
			f.t.Fatal(err)
		}
		_, name, _ := strings.Cut(k, "}")
		states = append(states, name+"="+s)
	}
	// By name, each once: calls laid out differently compare.
	slices.Sort(states)
	return reply, slices.Compact(states)
}

// outlives checks that every rule key of call holding a time ahead of the
// fixed clock expires no sooner than that time: a key that expired first
// would lose a slot booked ahead (a key lives until the last time booked
// in it has passed: tat_px in state.lua).
func (f *fixedClock) outlives(call []any) {
	ctx := context.Background()
	numKeys, _ := strconv.Atoi(fmt.Sprint(call[2]))
	for _, k := range call[3 : 3+numKeys] {
		key := k.(string)
		if !strings.Contains(key, "}:r:") {
			continue
		}
		v, err := f.c.Get(ctx, key).Int64()
		if err != nil || v <= fixedNow {
			continue
		}
		ttl, err := f.c.PTTL(ctx, key).Result()
		if err != nil {
			f.t.Fatal(err)
		}
		// A few ms pass between the call and PTTL; the key's expiry is
		// counted in whole ms.
		if need := time.Duration(v-fixedNow)*time.Microsecond - 50*time.Millisecond; ttl < need {
			f.t.Fatalf("%s holds a time %v ahead but expires in %v", key, time.Duration(v-fixedNow)*time.Microsecond, ttl)
		}
	}
}

// randomState draws a stored value for key, by its kind: for the epoch
// marker fresh, about to be renewed or absent; for a rule or penalty key
// absent, ahead of now, past, or corrupt, and for a penalty key sometimes
// a live penalty with its code.
func randomState(r *rand.Rand, key string, now int64) string {
	if strings.Contains(key, "}:e:") {
		switch r.IntN(3) {
		case 0:
			return fmt.Sprintf("e1700000000000000:%d", now/1000+60_000)
		case 1:
			return fmt.Sprintf("e1700000000000000:%d", now/1000+10)
		}
		return ""
	}
	switch r.IntN(5) {
	case 0:
		return strconv.FormatInt(now+int64(r.IntN(400_000)), 10)
	case 1:
		return strconv.FormatInt(now-int64(r.IntN(400_000)), 10)
	case 2:
		if strings.Contains(key, "}:p:") && r.IntN(3) == 0 {
			code := "|90018"
			if r.IntN(2) == 0 {
				code = "|a code\nof two lines" // as a hostile writer may leave
			}
			return strconv.FormatInt(now+int64(r.IntN(400_000)), 10) + code
		}
		return "junk"
	}
	return ""
}

// A lean call (ARGV[1] "q" or "r", lean.go) decides random batches of
// requests of paced rules, one request alone among them, exactly as the
// same batch in segments ("m", or one segment's own call, one.lua's for
// one request) does: the same answers once parsed, the same flags (but for the epoch a
// lazy call leaves unread when every request is admitted at once) and the
// same values left in the rule keys, over random states (penalties whose
// stored value holds a newline among them).
func TestLeanMatchesSegments(t *testing.T) {
	f := newFixedClock(t)
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[string]int{}
	for iter := range 300 {
		reqs := randomBatch(rng, 1+rng.IntN(7))
		var answers [2][]Reservation
		var flags [2]replyFlags
		var states [2][]string
		for v := range 2 {
			batch := make([]Request, len(reqs))
			for i, r := range reqs {
				r.Group = fmt.Sprintf("q%d-%d", iter, v)
				batch[i] = r
			}
			a := &scriptArgs{segs: appendSegmentEnds(nil, batch)}
			switch {
			case v == 0:
				f.l.appendLean(a, batch, iter%2 == 0)
			case len(a.segs) > 1:
				f.l.appendBatch(a, batch)
			case len(batch) == 1: // one request: one.lua's call, as reserveN makes
				f.l.appendOne(a, batch, true)
			default: // one segment: a call of its own form, as reserveN makes
				f.l.appendSegment(a, batch)
			}
			var reply string
			reply, states[v] = f.run(a.list, uint64(iter))
			if v == 0 {
				f.outlives(a.list)
			}
			answers[v] = make([]Reservation, len(batch))
			var err error
			if v == 0 {
				flags[v], err = parseLean(batch, reply, answers[v])
			} else {
				flags[v], err = parseSegments(batch, a.segs, reply, answers[v])
			}
			if err != nil {
				t.Fatalf("case %d, variant %d: %v\nreply %q\nreqs %+v", iter, v, err, reply, batch)
			}
		}
		// A lean call that does not ask for the epoch at once ('r') reads
		// it only once a request is not admitted at once.
		waited := false
		for _, res := range answers[0] {
			waited = waited || res.penalty == nil && (!res.ok || res.delay > 0)
		}
		if iter%2 == 1 && !waited {
			if flags[0].epoch != 0 {
				t.Fatalf("case %d: a lazy lean call admitting at once read the epoch %d", iter, flags[0].epoch)
			}
			flags[0].epoch = flags[1].epoch
			seen["epoch left unread"]++
		}
		if flags[0] != flags[1] {
			t.Fatalf("case %d: lean flags %+v, segments %+v", iter, flags[0], flags[1])
		}
		for i := range reqs {
			l, g := answers[0][i], answers[1][i]
			if fmt.Sprint(l.ok, l.delay, l.retryAfter, l.ruleIndex, l.booked, l.fleet) != fmt.Sprint(g.ok, g.delay, g.retryAfter, g.ruleIndex, g.booked, g.fleet) ||
				(l.penalty == nil) != (g.penalty == nil) || l.penalty != nil && *l.penalty != *g.penalty {
				t.Fatalf("case %d, request %d: lean %+v (penalty %v), segments %+v (penalty %v)", iter, i, l, l.penalty, g, g.penalty)
			}
			switch {
			case l.penalty != nil:
				seen["penalised"]++
				if strings.Contains(l.penalty.Code, "\n") {
					seen["code with a newline"]++
				}
			case l.ok:
				seen["admitted"]++
			default:
				seen["refused"]++
			}
		}
		if fmt.Sprint(states[0]) != fmt.Sprint(states[1]) {
			t.Fatalf("case %d: states %v and %v", iter, states[0], states[1])
		}
	}
	for _, k := range []string{"admitted", "refused", "penalised", "code with a newline", "epoch left unread"} {
		if seen[k] == 0 {
			t.Fatalf("answers %v: no case was %s", seen, k)
		}
	}
	t.Logf("answers compared: %v", seen)
}
