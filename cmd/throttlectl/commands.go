package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quotaware/throttle/internal/inspect"

	"github.com/quotaware/throttle/limiter"
)

// readState reads the state of provider (or of every provider), saying so
// when nothing at all is found: most often a wrong -prefix.
func readState(ctx context.Context, c *common, l *limiter.Shared, provider string) (inspect.State, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var groups []string
	if provider != "" {
		groups = []string{provider}
	}
	st, err := l.Inspect(ctx, groups...)
	if errors.Is(err, inspect.ErrNoKeys) || (err == nil && provider != "" && len(st.Replicas) == 0 &&
		len(st.Groups) == 1 && len(st.Groups[0].Penalties) == 0 && len(st.Groups[0].Rules) == 0) {
		what := fmt.Sprintf("under prefix %q", c.prefix)
		if provider != "" {
			what = fmt.Sprintf("for provider %q under prefix %q", provider, c.prefix)
		}
		return st, fmt.Errorf("no keys found %s, and no live replica: is -prefix right "+
			"(the Transports' WithRedisPrefix, default \"throttle\"), or -redis the Redis they use?", what)
	}
	if errors.Is(err, limiter.ErrInvalidRequest) {
		return st, usagef("%v", err)
	}
	return st, err
}

func status(ctx context.Context, c *common, provider string, jsonOut, check bool, stdout io.Writer) error {
	l, closeFn, err := connect(ctx, c)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := readState(ctx, c, l, provider)
	if err != nil {
		return err
	}
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		render(stdout, st)
	}
	if check && st.Active() {
		return &activeError{}
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
		st, err := readState(ctx, c, l, provider)
		var b strings.Builder
		if err != nil {
			if n == 1 {
				return err // a wrong address or prefix: say so and stop
			}
			fmt.Fprintf(&b, "%s  error: %v\n", time.Now().Format(time.DateTime), err)
		} else {
			render(&b, st)
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
	st, err := readState(ctx, c, l, provider)
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
		fmt.Fprintf(stdout, "No active penalty on %s of %s; the lift is still announced, so that replicas close a breaker they may hold open.\n", scope, provider)
	} else {
		fmt.Fprintf(stdout, "Penalty on %s of %s: code %s, ends %s (in %s).\n", scope, provider, found.Code,
			found.Until.Local().Format(timeLayout), inspect.FormatLeft(found.Left))
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
	if _, err := l.LiftPenalty(lctx, provider, scope); err != nil {
		if errors.Is(err, limiter.ErrInvalidRequest) {
			return usagef("%v", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "Lifted %s of %s at %s; the replicas were told.\n", scope, provider, time.Now().Format(time.RFC3339Nano))
	return nil
}

const timeLayout = "2006-01-02 15:04:05 MST"

// render writes the state as readable tables.
func render(w io.Writer, st inspect.State) {
	fmt.Fprintf(w, "prefix %q at %s (Redis clock)\n", st.Prefix, st.Now.Local().Format(timeLayout))
	ids := make([]string, 0, len(st.Replicas))
	for _, r := range st.Replicas {
		ids = append(ids, fmt.Sprintf("%s (beat %s ago)", r.ID, inspect.FormatLeft(st.Now.Sub(r.LastBeat))))
	}
	fmt.Fprintf(w, "replicas: %d live", len(st.Replicas))
	if len(ids) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(ids, ", "))
	}
	fmt.Fprintln(w)
	for _, g := range st.Groups {
		fmt.Fprintf(w, "\n%s\n", g.Group)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Scope, p.Code, p.Until.Local().Format(timeLayout), inspect.FormatLeft(p.Left), by)
			}
		}
		tw.Flush()
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if len(g.Rules) == 0 {
			fmt.Fprintln(w, "  rules: no state (idle)")
		} else {
			fmt.Fprintln(tw, "  RULE\tKIND\tSTATE")
			for _, r := range g.Rules {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Key, r.Kind, r.Words(st.Now))
			}
		}
		tw.Flush()
		if g.Truncated {
			fmt.Fprintf(w, "  (more than %d keys: the list is cut)\n", inspect.MaxKeys)
		}
	}
}
