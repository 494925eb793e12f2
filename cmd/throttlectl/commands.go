package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/quotaware/throttle/limiter/inspect"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// builtIn are the providers throttle ships presets for; a group of
// another name is known when it has state in Redis.
var builtIn = []string{dingtalk.Name, feishu.Name, wechat.Name, wecom.Name}

// readState reads the state of provider (or of every provider), saying so
// when nothing at all is found: most often a wrong -prefix. A named
// provider that has no state is an error when needState is set (a status
// must not vouch for a typo), and otherwise only when its name is neither
// built in nor found in Redis. Each Redis call has its own -timeout; the
// whole read has none, as its length grows with the keyspace (a million
// keys are walked in about a second per pattern).
func readState(ctx context.Context, c *common, l *limiter.Shared, provider string, needState bool) (inspect.State, error) {
	var groups []string
	if provider != "" {
		groups = []string{provider}
	}
	st, err := l.Inspect(ctx, groups...)
	switch {
	case errors.Is(err, inspect.ErrNoKeys):
		return st, fmt.Errorf("no keys found under prefix %q, and no live replica: is -prefix right "+
			"(the Transports' limiter.SharedConfig.Prefix, default \"throttle\"), or -redis the Redis they use?", c.prefix)
	case errors.Is(err, limiter.ErrInvalidRequest):
		return st, usagef("%v", err)
	case err != nil:
		return st, err
	}
	if provider == "" || !idle(st.Groups[0]) {
		return st, nil
	}
	withState := knownGroups(ctx, l)
	known := slices.Contains(builtIn, provider) || slices.Contains(withState, provider)
	if known && !needState {
		return st, nil
	}
	have := "none"
	if len(withState) > 0 {
		have = strings.Join(withState, ", ")
	}
	if !known {
		return st, fmt.Errorf("unknown provider %q: no keys under prefix %q; known providers: %s (built in); "+
			"with state here: %s", provider, c.prefix, strings.Join(builtIn, ", "), have)
	}
	return st, fmt.Errorf("no keys found for provider %q under prefix %q (providers with state here: %s): "+
		"it is idle, or -prefix or -redis is not the Transports'; there is nothing to vouch for", provider, c.prefix, have)
}

// idle reports whether a group has no state at all.
func idle(g inspect.GroupState) bool {
	return len(g.Penalties) == 0 && len(g.Rules) == 0 && !g.Truncated && !g.PenaltiesTruncated
}

// knownGroups lists the groups with state under the prefix, for a message;
// nil when they cannot be read.
func knownGroups(ctx context.Context, l *limiter.Shared) []string {
	st, err := l.Inspect(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, g := range st.Groups {
		out = append(out, g.Group)
	}
	return out
}

func status(ctx context.Context, c *common, provider string, jsonOut, check bool, stdout io.Writer) error {
	l, closeFn, err := connect(ctx, c)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := readState(ctx, c, l, provider, true)
	if err != nil {
		return err
	}
	learned := readLearned(ctx, l, st)
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		// The snapshot's fields as before, and the learned limits beside.
		out := struct {
			inspect.State
			Learned map[string][]learnedLimit `json:"learned,omitempty"`
		}{st, learned}
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		render(stdout, st, learned)
	}
	return verdict(st, check)
}

// verdict is status's exit: 1 under -check while a penalty is active or a
// replica reports a fault; 2 when the state could not be read in full (a
// bound met), with or without -check, since an absent penalty cannot be
// vouched for; otherwise 0.
func verdict(st inspect.State, check bool) error {
	var why []string
	if st.Active() {
		why = append(why, "penalties are active")
	}
	if len(st.Faults) > 0 {
		why = append(why, fmt.Sprintf("%d replica fault(s) recorded", len(st.Faults)))
	}
	incomplete := st.Complete()
	switch {
	case check && len(why) > 0:
		msg := strings.Join(why, "; ")
		if incomplete != nil {
			msg += "; and " + incomplete.Error()
		}
		return &activeError{msg: msg}
	case incomplete != nil:
		return fmt.Errorf("%w: not every penalty could be read, so none can be said to be absent", incomplete)
	}
	return nil
}

func watch(ctx context.Context, c *common, provider string, count int, stdout io.Writer) error {
	l, closeFn, err := connect(ctx, c)
	if err != nil {
		return err
	}
	defer closeFn()
	// Refresh in place on a terminal; elsewhere (a pipe, a log) one block
	// per refresh.
	tty := false
	if f, ok := stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for n := 1; ; n++ {
		st, err := readState(ctx, c, l, provider, true)
		var b strings.Builder
		if err != nil {
			if n == 1 {
				return err // a wrong address or prefix: say so and stop
			}
			fmt.Fprintf(&b, "%s  error: %v\n", time.Now().Format(time.DateTime), err)
		} else {
			render(&b, st, readLearned(ctx, l, st))
		}
		if tty {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J"+b.String())
		} else {
			fmt.Fprint(stdout, b.String()+"\n")
		}
		if count > 0 && n >= count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: a normal way to stop watching
		case <-ticker.C:
		}
	}
}

func lift(ctx context.Context, c *common, provider, scope string, yes bool, stdin io.Reader, stdout io.Writer) error {
	l, closeFn, err := connect(ctx, c)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := readState(ctx, c, l, provider, false)
	if err != nil {
		return err
	}
	var found *inspect.PenaltyState
	for i, p := range st.Groups[0].Penalties {
		if p.Scope == scope {
			found = &st.Groups[0].Penalties[i]
		}
	}
	if found == nil {
		if st.Groups[0].PenaltiesTruncated {
			return fmt.Errorf("%s has more than %d penalty keys and %s is not among those read: "+
				"cannot show what would be lifted", provider, inspect.MaxPenaltyKeys, scope)
		}
		fmt.Fprintf(stdout, "No active penalty on %s of %s; the lift is still announced, so that replicas close a breaker they may hold open.\n", scope, provider)
	} else {
		fmt.Fprintf(stdout, "Penalty on %s of %s: %s.\n", scope, provider, describe(*found))
	}
	if !yes {
		fmt.Fprintf(stdout, "Lift it? Every replica (%d live) calls %s again at once. [y/N] ", len(st.Replicas), scope)
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(stdout)
			return &activeError{msg: "not lifted"}
		}
	}
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	// Only the penalty shown goes: one recorded meanwhile (a new IP ban
	// while the operator read the prompt) stays, and is shown.
	removed, err := l.LiftPenaltyIf(lctx, provider, scope, found)
	var changed *limiter.PenaltyChangedError
	switch {
	case errors.As(err, &changed):
		if changed.Now == nil {
			fmt.Fprintf(stdout, "The penalty on %s of %s changed since it was shown: it is gone (it ended, or was lifted). "+
				"Nothing was removed, nothing announced.\n", scope, provider)
		} else {
			fmt.Fprintf(stdout, "The penalty on %s of %s changed since it was shown: it is now %s. "+
				"Nothing was removed, nothing announced; run lift again to decide on this one.\n", scope, provider, describe(*changed.Now))
		}
		return &activeError{msg: "not lifted: the penalty changed"}
	case errors.Is(err, limiter.ErrNotAnnounced):
		what := "There was no penalty key to delete"
		if removed {
			what = fmt.Sprintf("Deleted the penalty on %s of %s (%s)", scope, provider, describe(*found))
		}
		until := "their own copy of the penalty ends"
		if found != nil {
			until += " (" + found.Until.Local().Format(timeLayout) + ")"
		}
		fmt.Fprintf(stdout, "%s, but the replicas were NOT told: %v.\n"+
			"Replicas that hold a breaker open for %s keep refusing its calls until %s, "+
			"or until a lift is announced: run lift again once the Redis user may PUBLISH.\n", what, err, scope, until)
		return fmt.Errorf("lift not announced to the replicas: %w", err)
	case errors.Is(err, limiter.ErrInvalidRequest):
		return usagef("%v", err)
	case err != nil:
		return err
	}
	at := time.Now().Format(time.RFC3339Nano)
	if removed {
		fmt.Fprintf(stdout, "Lifted %s of %s at %s; removed the penalty %s; the replicas were told.\n", scope, provider, at, describe(*found))
	} else {
		fmt.Fprintf(stdout, "Lifted %s of %s at %s; there was no penalty to remove; the replicas were told.\n", scope, provider, at)
	}
	return nil
}

// describe writes a penalty for a person.
func describe(p inspect.PenaltyState) string {
	s := fmt.Sprintf("code %s, ends %s (in %s)", shown(p.Code), p.Until.Local().Format(timeLayout), inspect.FormatLeft(p.Left))
	if p.SetBy != "" {
		s += ", set by " + shown(p.SetBy)
	}
	return s
}

const timeLayout = "2006-01-02 15:04:05 MST"

// render writes the state as readable tables.
func render(w io.Writer, st inspect.State, learned map[string][]learnedLimit) {
	fmt.Fprintf(w, "prefix %q at %s (Redis clock)\n", st.Prefix, st.Now.Local().Format(timeLayout))
	ids := make([]string, 0, len(st.Replicas))
	for _, r := range st.Replicas {
		ids = append(ids, fmt.Sprintf("%s (beat %s ago)", shown(r.ID), inspect.FormatLeft(st.Now.Sub(r.LastBeat))))
	}
	fmt.Fprintf(w, "replicas: %d live", len(st.Replicas))
	if len(ids) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(ids, ", "))
	}
	fmt.Fprintln(w)
	for _, f := range st.Faults {
		what := "reports a fault"
		if f.What != "" {
			what = "cannot " + f.What
		}
		fmt.Fprintf(w, "FAULT: replica %s %s (%s): %s\n", shown(f.Replica), shown(what), shown(clip(f.Error, 200)), f.Meaning())
	}
	if st.FaultsTruncated {
		fmt.Fprintf(w, "FAULT: more than %d replica faults; only the first are shown\n", inspect.MaxFaults)
	}
	for _, g := range st.Groups {
		fmt.Fprintf(w, "\n%s\n", shown(g.Group))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if g.PenaltiesTruncated {
			fmt.Fprintf(w, "  penalties: more than %d keys, only the first read: others may be active\n", inspect.MaxPenaltyKeys)
		}
		if len(g.Penalties) == 0 {
			fmt.Fprintln(w, "  penalties: none")
		} else {
			fmt.Fprintf(w, "  penalties: %d active\n", len(g.Penalties))
			fmt.Fprintln(tw, "  SCOPE\tCODE\tENDS AT\tLEFT\tSET BY")
			for _, p := range g.Penalties {
				by := p.SetBy
				if by == "" {
					by = "-"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", shown(p.Scope), shown(p.Code), p.Until.Local().Format(timeLayout), inspect.FormatLeft(p.Left), shown(by))
			}
		}
		tw.Flush()
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if len(g.Rules) == 0 {
			fmt.Fprintln(w, "  rules: no state (idle)")
		} else {
			fmt.Fprintln(tw, "  RULE\tKIND\tSTATE")
			for _, r := range g.Rules {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", shown(r.Key), shown(r.Kind), shown(r.Words(st.Now)))
			}
		}
		tw.Flush()
		renderLearned(w, st.Now, learned[g.Group])
		if g.Truncated {
			fmt.Fprintf(w, "  (more than %d rule keys: the rule list is cut; every penalty is shown above)\n", inspect.MaxKeys)
		}
	}
}

// clip shortens s to at most n bytes for a table, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// shown is a value read from Redis as the terminal may print it: quoted,
// with its unprintable characters escaped (controls, bidi overrides,
// zero-width and line separators, invalid UTF-8), when it has any: anyone
// who can write to Redis could otherwise redraw or reorder the operator's
// screen, say over a penalty with "penalties: none". Else as it is.
func shown(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
