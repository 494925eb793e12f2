package limiter

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"

	"github.com/redis/go-redis/v9"
)

// Inspect reads the state of the given groups, or of every group under the
// prefix when none is given (which scans every node's keys matching the
// prefix; name the groups to scan only their own slot). Every penalty of a
// group is read whatever number of other keys the group holds, up to
// inspect.MaxPenaltyKeys; State.Complete says whether a bound was met.
func (l *redisLimiter) Inspect(ctx context.Context, groups ...string) (inspect.State, error) {
	st := inspect.State{Prefix: l.prefix, Faults: []inspect.Fault{}}
	now, err := l.client.Time(ctx).Result()
	if err != nil {
		return st, unavailable("time", err)
	}
	st.Now = now
	if st.Replicas, err = l.replicas(ctx, now); err != nil {
		return st, err
	}
	if st.Faults, st.FaultsTruncated, err = l.faults(ctx); err != nil {
		return st, err
	}
	if len(groups) == 0 {
		if groups, err = l.discoverGroups(ctx); err != nil {
			return st, err
		}
		if len(groups) == 0 && len(st.Replicas) == 0 && len(st.Faults) == 0 {
			return st, fmt.Errorf("%w %q", inspect.ErrNoKeys, l.prefix)
		}
	}
	for _, g := range groups {
		if err := rulecore.CheckKey(g); err != nil {
			return st, fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
		}
		gs, err := l.inspectGroup(ctx, g, now)
		if err != nil {
			return st, err
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}

func (l *redisLimiter) replicas(ctx context.Context, now time.Time) ([]inspect.Replica, error) {
	zs, err := l.client.ZRangeWithScores(ctx, "{"+l.prefix+":registry}:replicas", 0, -1).Result()
	if err != nil {
		return nil, unavailable("registry", err)
	}
	var out []inspect.Replica
	for _, z := range zs {
		beat := time.UnixMilli(int64(z.Score))
		if now.Sub(beat) <= inspect.ReplicaLiveWithin {
			out = append(out, inspect.Replica{ID: fmt.Sprint(z.Member), LastBeat: beat})
		}
	}
	return out, nil
}

// faults reads the faults replicas report, {prefix:registry}:fault:<id> =
// "<what>: <error>", at most inspect.MaxFaults of them.
func (l *redisLimiter) faults(ctx context.Context) ([]inspect.Fault, bool, error) {
	tag := "{" + l.prefix + ":registry}"
	head := tag + ":fault:"
	keys, truncated, err := l.scanTag(ctx, tag, globEscape(head)+"*", inspect.MaxFaults)
	if err != nil || len(keys) == 0 {
		return []inspect.Fault{}, truncated, err
	}
	sort.Strings(keys)
	vals, err := l.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, false, unavailable("faults", err)
	}
	out := make([]inspect.Fault, 0, len(keys))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // expired since the scan
		}
		// One line per fault of the replica ("publish: ...", "subscribe:
		// ..."; faults.value).
		for _, line := range strings.Split(s, "\n") {
			if line == "" {
				continue
			}
			what, text, found := strings.Cut(line, ": ")
			if !found {
				what, text = "", line
			}
			out = append(out, inspect.Fault{Replica: strings.TrimPrefix(keys[i], head), What: what, Error: text})
		}
	}
	return out, truncated, nil
}

// scanNodes calls fn with every node that may hold keys: the masters of a
// cluster, the shards of a ring, or the client itself.
func (l *redisLimiter) scanNodes(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("limiter: Inspect: unsupported client type %T", l.client)
}

// scanTag collects up to limit keys of one hash tag matching pattern: on a
// cluster, from the node that owns the tag's slot only; on a ring, from
// every shard (a ring spreads tags by its own hash); otherwise from the one
// server. truncated reports that more keys match.
func (l *redisLimiter) scanTag(ctx context.Context, tag, pattern string, limit int) ([]string, bool, error) {
	if c, ok := l.client.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, tag)
		if err != nil {
			return nil, false, unavailable("slot owner", err)
		}
		return scan(ctx, node, pattern, limit)
	}
	var keys []string
	truncated := false
	var mu sync.Mutex // scanNodes may call fn concurrently
	err := l.scanNodes(ctx, func(ctx context.Context, node *redis.Client) error {
		ks, tr, err := scan(ctx, node, pattern, limit)
		mu.Lock()
		keys, truncated = append(keys, ks...), truncated || tr
		mu.Unlock()
		return err
	})
	if len(keys) > limit {
		keys, truncated = keys[:limit], true
	}
	return keys, truncated, err
}

// scanBatch is SCAN's COUNT: how many keys Redis looks at per call. Larger
// takes fewer round trips through a big keyspace (a million keys: about
// 0.8s at 1000, 0.7s at 10000 on loopback) but holds Redis longer per call.
const scanBatch = 1000

// scan collects up to limit keys matching pattern on node.
func scan(ctx context.Context, node redis.Cmdable, pattern string, limit int) (keys []string, truncated bool, err error) {
	err = scanEach(ctx, node, pattern, func(batch []string) bool {
		keys = append(keys, batch...)
		if len(keys) > limit {
			keys, truncated = keys[:limit], true
			return false
		}
		return true
	})
	if err != nil {
		return nil, false, err
	}
	return keys, truncated, nil
}

// scanEach walks the keys matching pattern on node, a batch at a time,
// until fn returns false or the walk ends.
func scanEach(ctx context.Context, node redis.Cmdable, pattern string, fn func([]string) bool) error {
	var cursor uint64
	for {
		batch, next, err := node.Scan(ctx, cursor, pattern, scanBatch).Result()
		if err != nil {
			return unavailable("scan", err)
		}
		if !fn(batch) || next == 0 {
			return nil
		}
		cursor = next
	}
}

// globEscape escapes the characters SCAN's MATCH treats as patterns.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// discoverGroups returns the groups that have keys under the prefix, sorted. It
// walks every key under the prefix (a group with one key among a million of
// another is found) and keeps only the names: with more than
// inspect.MaxGroups groups it fails with inspect.ErrIncomplete.
func (l *redisLimiter) discoverGroups(ctx context.Context) ([]string, error) {
	head := "{" + l.prefix + ":"
	seen := make(map[string]bool)
	var mu sync.Mutex // scanNodes may call fn concurrently
	tooMany := false
	err := l.scanNodes(ctx, func(ctx context.Context, node *redis.Client) error {
		return scanEach(ctx, node, globEscape(head)+"*}:*", func(keys []string) bool {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				g, _, ok := strings.Cut(strings.TrimPrefix(k, head), "}:")
				if ok && g != "registry" && rulecore.CheckKey(g) == nil {
					seen[g] = true
				}
			}
			tooMany = tooMany || len(seen) > inspect.MaxGroups
			return !tooMany
		})
	})
	if err != nil {
		return nil, err
	}
	if tooMany {
		return nil, fmt.Errorf("%w: more than %d groups under prefix %q; name the groups to read",
			inspect.ErrIncomplete, inspect.MaxGroups, l.prefix)
	}
	groups := make([]string, 0, len(seen))
	for g := range seen {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	return groups, nil
}

func (l *redisLimiter) inspectGroup(ctx context.Context, group string, now time.Time) (inspect.GroupState, error) {
	gs := inspect.GroupState{Group: group, Penalties: []inspect.PenaltyState{}, Rules: []inspect.RuleState{}}
	tag := "{" + l.prefix + ":" + group + "}"
	// Penalties apart from rules, each with its own MATCH and bound: a
	// group's rule keys may be a million (one per chat), its penalties are
	// few, and none may hide behind the rules.
	penaltyKeys, cut, err := l.scanTag(ctx, tag, globEscape(tag)+":p:*", inspect.MaxPenaltyKeys)
	if err != nil {
		return gs, err
	}
	gs.PenaltiesTruncated = cut
	ruleKeys, cut, err := l.scanTag(ctx, tag, globEscape(tag)+":r:*", inspect.MaxKeys)
	if err != nil {
		return gs, err
	}
	gs.Truncated = cut
	sort.Strings(penaltyKeys)
	sort.Strings(ruleKeys)
	descs, err := l.client.HGetAll(ctx, l.catalogKey(group)).Result()
	if err != nil {
		return gs, unavailable("catalogue", err)
	}

	// One round trip for every penalty value and rule key type, one more
	// for the rules' contents.
	pipe := l.client.Pipeline()
	pvals := make([]*redis.StringCmd, len(penaltyKeys))
	for i, k := range penaltyKeys {
		pvals[i] = pipe.Get(ctx, k)
	}
	types := make([]*redis.StatusCmd, len(ruleKeys))
	for i, k := range ruleKeys {
		types[i] = pipe.Type(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return gs, unavailable("inspect", err)
	}
	for i, k := range penaltyKeys {
		v, err := pvals[i].Result()
		if err != nil {
			continue // expired since the scan
		}
		p, ok := parsePenaltyValue(strings.TrimPrefix(k, tag+":p:"), v)
		if !ok || !p.Until.After(now) {
			continue
		}
		p.Left, p.Value = p.Until.Sub(now), v
		gs.Penalties = append(gs.Penalties, p)
	}

	rules, err := l.readRules(ctx, tag, ruleKeys, types, descs, now)
	gs.Rules = append(gs.Rules, rules...)
	return gs, err
}

// Penalties returns the penalties in force in Redis of the scopes named,
// in one MGET of their keys (all in the group's slot): what a lift of the
// penalties a provider's reset ended starts from (each state's Value for
// LiftPenaltyIf). Scopes without one are left out.
func (l *redisLimiter) Penalties(ctx context.Context, group string, scopes []string) ([]inspect.PenaltyState, error) {
	if err := rulecore.CheckKey(group); err != nil {
		return nil, fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if len(scopes) == 0 {
		return nil, nil
	}
	keys := make([]string, len(scopes))
	for i, sc := range scopes {
		keys[i] = l.penaltyKey(group, sc)
	}
	pipe := l.client.Pipeline()
	now := pipe.Time(ctx)
	vals := pipe.MGet(ctx, keys...)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, unavailable("penalties", err)
	}
	var out []inspect.PenaltyState
	for i, v := range vals.Val() {
		str, ok := v.(string)
		if !ok {
			continue // no penalty
		}
		p, ok := parsePenaltyValue(scopes[i], str)
		if !ok || !p.Until.After(now.Val()) {
			continue
		}
		p.Left, p.Value = p.Until.Sub(now.Val()), str
		out = append(out, p)
	}
	return out, nil
}

// Penalties is the Memory limiter's counterpart of Shared.Penalties (its
// states carry no Value).
func (m *Memory) Penalties(_ context.Context, group string, scopes []string) ([]inspect.PenaltyState, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []inspect.PenaltyState
	for _, sc := range scopes {
		if p, ok := m.penalties[stateKey{group, sc}]; ok && p.Until.After(now) {
			out = append(out, inspect.PenaltyState{Scope: sc, Code: p.Code, Until: p.Until, Left: p.Until.Sub(now)})
		}
	}
	return out, nil
}

// readRules reads the state of each rule key whose type types holds, in one
// round trip, and puts it in words.
func (l *redisLimiter) readRules(ctx context.Context, tag string, ruleKeys []string, types []*redis.StatusCmd, descs map[string]string, now time.Time) ([]inspect.RuleState, error) {
	pipe := l.client.Pipeline()
	type read struct {
		rs    inspect.RuleState
		str   *redis.StringCmd
		hash  *redis.MapStringStringCmd
		pttl  *redis.DurationCmd
		count *redis.IntCmd
	}
	reads := make([]read, 0, len(ruleKeys))
	var out []inspect.RuleState
	for i, k := range ruleKeys {
		r := read{rs: inspect.RuleState{Key: strings.TrimPrefix(k, tag+":r:"), Kind: "unknown"}}
		switch types[i].Val() {
		case "string":
			r.rs.Kind = "paced"
			r.str = pipe.Get(ctx, k)
		case "hash":
			r.rs.Kind = "calendar"
			r.hash = pipe.HGetAll(ctx, k)
			r.pttl = pipe.PTTL(ctx, k)
		case "zset":
			r.rs.Kind = "concurrency"
			r.count = pipe.ZCount(ctx, k, "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf")
		case "none":
			continue // expired since the scan
		}
		reads = append(reads, r)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable("inspect", err)
	}
	for _, r := range reads {
		rs := r.rs
		switch {
		case r.str != nil:
			if sends, latest, ok := parseWindowLog(r.str.Val()); ok {
				rs.Kind, rs.Used, rs.Ahead = "window", sends, max(0, time.UnixMicro(latest).Sub(now))
			} else if tat, err := strconv.ParseInt(r.str.Val(), 10, 64); err == nil {
				rs.Ahead = max(0, time.UnixMicro(tat).Sub(now))
			}
		case r.hash != nil:
			cal, described := parseRuleDescription(rs.Key, descs[rs.Key])
			readCalendar(&rs, core(&cal), described, r.hash.Val(), r.pttl.Val(), now)
		case r.count != nil:
			rs.InFlight = r.count.Val()
		}
		out = append(out, rs)
	}
	return out, nil
}

// readCalendar fills a calendar rule's state from its hash (window start µs
// → count) and the key's time to live (the end of its latest window).
func readCalendar(rs *inspect.RuleState, r *rulecore.Rule, described bool, counts map[string]string, pttl time.Duration, now time.Time) {
	nowUs := now.UnixMicro()
	if described {
		b := r.Windows(now)
		cur, next := b[1], b[2]
		if nowUs < cur { // within the grace of a new window
			cur, next = b[0], b[1]
		}
		rs.Used, _ = strconv.ParseInt(counts[strconv.FormatInt(cur, 10)], 10, 64)
		rs.Limit, rs.Window = r.Limit, r.Unit.String()
		rs.ResetsAt = time.UnixMicro(next)
		return
	}
	// Not described: the current window is the latest start not after now,
	// and it ends at the next start or, if none, when the key expires.
	var cur, next int64 = -1, -1
	for f, v := range counts {
		start, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			continue
		}
		if start <= nowUs && start > cur {
			cur = start
			rs.Used, _ = strconv.ParseInt(v, 10, 64)
		}
		if start > nowUs && (next < 0 || start < next) {
			next = start
		}
	}
	switch {
	case next > 0:
		rs.ResetsAt = time.UnixMicro(next)
	case pttl > 0:
		rs.ResetsAt = now.Add(pttl).Truncate(time.Second)
	}
}

// parsePenaltyValue reads a penalty key's value "end µs|code", possibly
// followed by "|replica".
func parsePenaltyValue(scope, v string) (inspect.PenaltyState, bool) {
	end, rest, _ := strings.Cut(v, "|")
	us, err := strconv.ParseInt(end, 10, 64)
	if err != nil || us > maxStoredUs {
		return inspect.PenaltyState{}, false
	}
	code, by, _ := strings.Cut(rest, "|")
	return inspect.PenaltyState{Scope: scope, Code: capCode(code), Until: time.UnixMicro(min(us, lastShownUs)), SetBy: capCode(by)}, true
}

// lastShownUs is the latest end a penalty is shown with, the end of the
// year 9999: JSON and RFC 3339 write no later time (a penalty given until
// the year 10000 made `throttlectl status -json` print nothing).
var lastShownUs = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).UnixMicro()

// CalendarUsed returns, for each calendar rule of group, the requests counted
// in its current window (by this process's clock), in one round trip; other
// rules read as 0. It is what a quota gauge reads.
func (l *redisLimiter) CalendarUsed(ctx context.Context, group string, rules []rule.Rule) ([]int64, error) {
	out := make([]int64, len(rules))
	now := time.Now()
	pipe := l.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(rules))
	for i := range rules {
		if core(&rules[i]).Kind != rulecore.Calendar {
			continue
		}
		cmds[i] = pipe.HGet(ctx, l.ruleKey(group, rules[i].Key()), strconv.FormatInt(core(&rules[i]).Windows(now)[1], 10))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable("calendar", err)
	}
	for i, c := range cmds {
		if c != nil {
			out[i], _ = c.Int64()
		}
	}
	return out, nil
}

// CalendarUsed is the Memory limiter's counterpart of Shared.CalendarUsed.
func (m *Memory) CalendarUsed(_ context.Context, group string, rules []rule.Rule) ([]int64, error) {
	out := make([]int64, len(rules))
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range rules {
		if core(&rules[i]).Kind != rulecore.Calendar {
			continue
		}
		if st := m.calendar[stateKey{group, rules[i].Key()}]; st != nil {
			out[i] = st.counts[core(&rules[i]).Windows(now)[1]]
		}
	}
	return out, nil
}
