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

	"github.com/redis/go-redis/v9"
)

// Inspection: what the shared state holds, in words, for the people on call
// (see cmd/throttlectl). Everything here only reads, and its work is
// bounded: keys are found with SCAN and a MATCH on the group's hash tag
// (never KEYS), on the node that owns the tag's slot, and at most
// MaxInspectKeys keys are read per group.

// MaxInspectKeys bounds the keys Inspect reads per group; a group with more
// is reported with Truncated set.
const MaxInspectKeys = 10_000

// ReplicaLiveWithin is how recent a replica's last beat must be for Inspect
// to count it live: three beats of the Transport's registry.
const ReplicaLiveWithin = 6 * time.Second

// State is a snapshot of the shared state under one prefix.
type State struct {
	Prefix string `json:"prefix"`
	// Now is Redis's clock when the snapshot was taken.
	Now time.Time `json:"now"`
	// Replicas are the replicas whose last beat is within ReplicaLiveWithin.
	Replicas []Replica `json:"replicas"`
	// Groups are the provider groups asked for, or every group found.
	Groups []GroupState `json:"groups"`
}

// Replica is one live replica in the registry.
type Replica struct {
	ID       string    `json:"id"`
	LastBeat time.Time `json:"last_beat"`
}

// GroupState is the state of one provider group (one hash tag).
type GroupState struct {
	Group     string         `json:"group"`
	Penalties []PenaltyState `json:"penalties"`
	Rules     []RuleState    `json:"rules"`
	// Truncated is set when the group holds more than MaxInspectKeys keys.
	Truncated bool `json:"truncated,omitempty"`
}

// PenaltyState is one active shared penalty.
type PenaltyState struct {
	Scope string    `json:"scope"`
	Code  string    `json:"code"`
	Until time.Time `json:"until"`
	// Left is how long until the penalty ends.
	Left time.Duration `json:"left_ns"`
	// SetBy is the replica that recorded it, when the penalty says so.
	SetBy string `json:"set_by,omitempty"`
}

// RuleState is the state of one rule key.
type RuleState struct {
	Key string `json:"key"`
	// Kind is "paced", "window", "calendar", "concurrency" or "unknown".
	Kind string `json:"kind"`
	// Ahead is, for a paced or window rule, how far ahead of now slots are
	// booked (zero: none is).
	Ahead time.Duration `json:"ahead_ns,omitempty"`
	// Used is, for a calendar rule, the requests counted in the current
	// window, and Limit its limit (0 when no replica described the rule);
	// for a window rule, the sends its log holds (a period back and ahead).
	Used  int64 `json:"used"`
	Limit int64 `json:"limit,omitempty"`
	// Window is the calendar unit ("day", "month"...), when described.
	Window string `json:"window,omitempty"`
	// ResetsAt is when the current calendar window ends.
	ResetsAt time.Time `json:"resets_at,omitzero"`
	// InFlight is, for a concurrency rule, the requests holding a lease.
	InFlight int64 `json:"in_flight,omitempty"`
}

// Words describes the rule's state for a person, relative to now.
func (r RuleState) Words(now time.Time) string {
	switch r.Kind {
	case "paced":
		if r.Ahead <= 0 {
			return "idle: a request goes at once"
		}
		return "slots booked " + r.Ahead.Round(time.Millisecond).String() + " ahead"
	case "calendar":
		s := strconv.FormatInt(r.Used, 10)
		if r.Limit > 0 {
			s += fmt.Sprintf(" / %d used (%d%%)", r.Limit, r.Used*100/r.Limit)
		} else {
			s += " used (limit not described)"
		}
		if r.Window != "" {
			s += " this " + r.Window
		}
		if !r.ResetsAt.IsZero() {
			s += fmt.Sprintf(", resets %s (in %s)", r.ResetsAt.Format("2006-01-02 15:04 MST"), roundLeft(r.ResetsAt.Sub(now)))
		}
		return s
	case "concurrency":
		return strconv.FormatInt(r.InFlight, 10) + " in flight"
	case "window":
		s := strconv.FormatInt(r.Used, 10) + " sends in the window's log"
		if r.Ahead > 0 {
			s += ", slots booked " + r.Ahead.Round(time.Millisecond).String() + " ahead"
		}
		return s
	}
	return "unknown key type"
}

// roundLeft writes a duration for reading: "7d06h28m", "2h05m", "4m07s".
func roundLeft(d time.Duration) string {
	switch {
	case d < time.Second:
		return max(d, 0).Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh%02dm", int(d.Hours())/24, int(d.Hours())%24, int(d.Minutes())%60)
}

// Active reports whether any group has an active penalty.
func (s *State) Active() bool {
	for _, g := range s.Groups {
		if len(g.Penalties) > 0 {
			return true
		}
	}
	return false
}

// ErrNoKeys is returned by Inspect when nothing at all lives under the
// prefix (no group, no replica): most often a wrong prefix.
var ErrNoKeys = errors.New("limiter: no keys under the prefix")

// Inspect reads the state of the given groups, or of every group under the
// prefix when none is given (which scans every node's keys matching the
// prefix; name the groups to scan only their own slot).
func (l *redisLimiter) Inspect(ctx context.Context, groups ...string) (State, error) {
	st := State{Prefix: l.prefix}
	now, err := l.client.Time(ctx).Result()
	if err != nil {
		return st, unavailable("time", err)
	}
	st.Now = now
	if st.Replicas, err = l.replicas(ctx, now); err != nil {
		return st, err
	}
	if len(groups) == 0 {
		if groups, err = l.discoverGroups(ctx); err != nil {
			return st, err
		}
		if len(groups) == 0 && len(st.Replicas) == 0 {
			return st, fmt.Errorf("%w %q", ErrNoKeys, l.prefix)
		}
	}
	for _, g := range groups {
		if err := checkKey("group", g); err != nil {
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

func (l *redisLimiter) replicas(ctx context.Context, now time.Time) ([]Replica, error) {
	zs, err := l.client.ZRangeWithScores(ctx, "{"+l.prefix+":registry}:replicas", 0, -1).Result()
	if err != nil {
		return nil, unavailable("registry", err)
	}
	var out []Replica
	for _, z := range zs {
		beat := time.UnixMilli(int64(z.Score))
		if now.Sub(beat) <= ReplicaLiveWithin {
			out = append(out, Replica{ID: fmt.Sprint(z.Member), LastBeat: beat})
		}
	}
	return out, nil
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

// scanTag collects up to MaxInspectKeys keys of one hash tag: on a cluster,
// from the node that owns the tag's slot only; on a ring, from every shard
// (a ring spreads tags by its own hash); otherwise from the one server.
func (l *redisLimiter) scanTag(ctx context.Context, tag string) ([]string, bool, error) {
	pattern := globEscape(tag) + ":*"
	if c, ok := l.client.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, tag)
		if err != nil {
			return nil, false, unavailable("slot owner", err)
		}
		return scan(ctx, node, pattern, MaxInspectKeys)
	}
	var keys []string
	truncated := false
	var mu sync.Mutex // scanNodes may call fn concurrently
	err := l.scanNodes(ctx, func(ctx context.Context, node *redis.Client) error {
		ks, tr, err := scan(ctx, node, pattern, MaxInspectKeys)
		mu.Lock()
		keys, truncated = append(keys, ks...), truncated || tr
		mu.Unlock()
		return err
	})
	return keys, truncated, err
}

// scan collects up to limit keys matching pattern on node.
func scan(ctx context.Context, node redis.Cmdable, pattern string, limit int) (keys []string, truncated bool, err error) {
	var cursor uint64
	for {
		var batch []string
		batch, cursor, err = node.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return nil, false, unavailable("scan", err)
		}
		keys = append(keys, batch...)
		if len(keys) > limit {
			return keys[:limit], true, nil
		}
		if cursor == 0 {
			return keys, false, nil
		}
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

// discoverGroups finds the groups under the prefix from their keys.
func (l *redisLimiter) discoverGroups(ctx context.Context) ([]string, error) {
	head := "{" + l.prefix + ":"
	seen := make(map[string]bool)
	var mu sync.Mutex // scanNodes may call fn concurrently
	err := l.scanNodes(ctx, func(ctx context.Context, node *redis.Client) error {
		keys, _, err := scan(ctx, node, globEscape(head)+"*}:*", MaxInspectKeys)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			g, _, ok := strings.Cut(strings.TrimPrefix(k, head), "}:")
			if ok && g != "registry" {
				seen[g] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	groups := make([]string, 0, len(seen))
	for g := range seen {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	return groups, nil
}

func (l *redisLimiter) inspectGroup(ctx context.Context, group string, now time.Time) (GroupState, error) {
	gs := GroupState{Group: group, Penalties: []PenaltyState{}, Rules: []RuleState{}}
	tag := "{" + l.prefix + ":" + group + "}"
	keys, truncated, err := l.scanTag(ctx, tag)
	if err != nil {
		return gs, err
	}
	gs.Truncated = truncated
	sort.Strings(keys)
	var penaltyKeys, ruleKeys []string
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, tag+":p:"):
			penaltyKeys = append(penaltyKeys, k)
		case strings.HasPrefix(k, tag+":r:"):
			ruleKeys = append(ruleKeys, k)
		}
	}
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
		p.Left = p.Until.Sub(now)
		gs.Penalties = append(gs.Penalties, p)
	}

	pipe = l.client.Pipeline()
	type read struct {
		rs    RuleState
		str   *redis.StringCmd
		hash  *redis.MapStringStringCmd
		pttl  *redis.DurationCmd
		count *redis.IntCmd
	}
	reads := make([]read, 0, len(ruleKeys))
	for i, k := range ruleKeys {
		r := read{rs: RuleState{Key: strings.TrimPrefix(k, tag+":r:"), Kind: "unknown"}}
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
		return gs, unavailable("inspect", err)
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
			rule, described := parseRuleDescription(rs.Key, descs[rs.Key])
			readCalendar(&rs, rule, described, r.hash.Val(), r.pttl.Val(), now)
		case r.count != nil:
			rs.InFlight = r.count.Val()
		}
		gs.Rules = append(gs.Rules, rs)
	}
	return gs, nil
}

// readCalendar fills a calendar rule's state from its hash (window start µs
// → count) and the key's time to live (the end of its latest window).
func readCalendar(rs *RuleState, rule Rule, described bool, counts map[string]string, pttl time.Duration, now time.Time) {
	nowUs := now.UnixMicro()
	if described {
		b := rule.windows(now)
		cur, next := b[1], b[2]
		if nowUs < cur { // within the grace of a new window
			cur, next = b[0], b[1]
		}
		rs.Used, _ = strconv.ParseInt(counts[strconv.FormatInt(cur, 10)], 10, 64)
		rs.Limit, rs.Window = rule.limit, rule.unit.String()
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
func parsePenaltyValue(scope, v string) (PenaltyState, bool) {
	end, rest, _ := strings.Cut(v, "|")
	us, err := strconv.ParseInt(end, 10, 64)
	if err != nil {
		return PenaltyState{}, false
	}
	code, by, _ := strings.Cut(rest, "|")
	return PenaltyState{Scope: scope, Code: code, Until: time.UnixMicro(us), SetBy: by}, true
}

// CalendarUsed returns, for each calendar rule of group, the requests counted
// in its current window (by this process's clock), in one round trip; other
// rules read as 0. It is what a quota gauge reads.
func (l *redisLimiter) CalendarUsed(ctx context.Context, group string, rules []Rule) ([]int64, error) {
	out := make([]int64, len(rules))
	now := time.Now()
	pipe := l.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(rules))
	for i := range rules {
		if rules[i].kind != calendarRule {
			continue
		}
		cmds[i] = pipe.HGet(ctx, l.ruleKey(group, rules[i].key), strconv.FormatInt(rules[i].windows(now)[1], 10))
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

// CalendarUsed is the Memory limiter's counterpart of Redis.CalendarUsed.
func (m *Memory) CalendarUsed(_ context.Context, group string, rules []Rule) ([]int64, error) {
	out := make([]int64, len(rules))
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range rules {
		if rules[i].kind != calendarRule {
			continue
		}
		if st := m.calendar[stateKey{group, rules[i].key}]; st != nil {
			out[i] = st.counts[rules[i].windows(now)[1]]
		}
	}
	return out, nil
}
