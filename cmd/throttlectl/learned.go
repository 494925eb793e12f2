package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quotaware/throttle/internal/learnedhash"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/inspect"
)

// Learned limits: what the replicas applied in place of a preset's table,
// kept in each group's hash (internal/learnedhash, read here as the
// replicas read it): a lower limit an answer stated (Feishu's
// x-ogw-ratelimit-limit on a 99991400), or one app's limit read from the
// provider's quota endpoint (WeChat's quota/get, Config.Reconcile).

// learnedLimit is one learned limit as status shows it.
type learnedLimit struct {
	API    string    `json:"api"`
	App    string    `json:"app,omitempty"`
	Window string    `json:"window"`
	Limit  int       `json:"limit"`
	Source string    `json:"source"`
	Until  time.Time `json:"until"`
}

// maxLearnedShown bounds the learned limits read per group.
const maxLearnedShown = 1000

// readLearned reads the learned limits of the snapshot's groups, by group;
// a group whose hash cannot be read is left out (it is shown as having
// none), since the limits are a help to the reader, not a verdict.
func readLearned(ctx context.Context, l *limiter.Shared, st inspect.State) map[string][]learnedLimit {
	out := map[string][]learnedLimit{}
	for _, g := range st.Groups {
		// A flooded hash is read in part: a status shows at most
		// maxLearnedShown of its limits anyway.
		all, _, err := learnedhash.Read(ctx, l.Client(), learnedhash.Key(l.Config().Prefix, g.Group), 4*maxLearnedShown)
		if err != nil {
			continue
		}
		for field, v := range all {
			ll, ok := learnedhash.Parse(field, v)
			if !ok || !learnedhash.InForce(ll, st.Now) {
				continue // garbled or lapsed: no replica applies it
			}
			out[g.Group] = append(out[g.Group], learnedLimit{API: ll.API, App: ll.App, Window: ll.Window, Limit: ll.Limit,
				Until: ll.Until, Source: learnedSource(g.Group, ll.App != "")})
		}
		slices.SortFunc(out[g.Group], func(a, b learnedLimit) int {
			return strings.Compare(a.App+" "+a.API+" "+a.Window, b.App+" "+b.API+" "+b.Window)
		})
		if len(out[g.Group]) > maxLearnedShown {
			out[g.Group] = out[g.Group][:maxLearnedShown]
		}
	}
	return out
}

// learnedSource says where a learned limit came from.
func learnedSource(group string, fromQuota bool) string {
	switch {
	case fromQuota && group == "wechat":
		return "quota/get (reconciled)"
	case fromQuota:
		return "quota endpoint (reconciled)"
	case group == "feishu":
		return "99991400 (x-ogw-ratelimit-limit)"
	}
	return "provider's answer"
}

// renderLearned writes a group's learned limits.
func renderLearned(w io.Writer, now time.Time, ls []learnedLimit) {
	if len(ls) == 0 {
		return
	}
	fmt.Fprintf(w, "  learned limits: %d in force\n", len(ls))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  API\tAPP\tWINDOW\tLIMIT\tSOURCE\tEXPIRES AT\tLEFT")
	for _, l := range ls {
		app := l.App
		if app == "" {
			app = "(all)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\n", shown(l.API), shown(app), shown(l.Window), l.Limit, shown(l.Source),
			l.Until.Local().Format(timeLayout), inspect.FormatLeft(l.Until.Sub(now)))
	}
	tw.Flush()
}
