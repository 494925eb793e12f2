// Package inspect holds what the shared limiter's state looks like to the
// people on call: the snapshot limiter.Shared.Inspect returns and
// cmd/throttlectl prints. It is internal so that the limiter's public
// surface stays the limiting itself; the snapshot's shape may change with
// the state it describes.
package inspect

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Inspection: what the shared state holds, in words, for the people on call
// (see cmd/throttlectl). Everything here only reads, and its work is
// bounded: keys are found with SCAN and a MATCH on the group's hash tag
// (never KEYS), on the node that owns the tag's slot, and at most
// MaxKeys keys are read per group.

// MaxKeys bounds the keys Inspect reads per group; a group with more
// is reported with Truncated set.
const MaxKeys = 10_000

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
	// Truncated is set when the group holds more than MaxKeys keys.
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
			s += fmt.Sprintf(", resets %s (in %s)", r.ResetsAt.Format("2006-01-02 15:04 MST"), FormatLeft(r.ResetsAt.Sub(now)))
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

// FormatLeft writes a time left for reading: "7d06h28m", "2h05m",
// "4m07s", "850ms"; "0s" once it is over.
func FormatLeft(d time.Duration) string {
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
