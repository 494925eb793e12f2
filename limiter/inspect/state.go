package inspect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Inspection: what the shared state holds, in words, for the people on call
// (see cmd/throttlectl). Everything here only reads, and its memory is
// bounded: keys are found with SCAN and a MATCH on the group's hash tag
// (never KEYS), on the node that owns the tag's slot. Penalty keys are
// found with a MATCH of their own, apart from rule keys, so that no number
// of rule keys can hide a penalty; each kind has its own bound, and a
// bound met is said, never passed over in silence.

// MaxKeys bounds the rule keys Inspect reads per group; a group with more
// is reported with Truncated set (its penalties are still all read).
const MaxKeys = 10_000

// MaxPenaltyKeys bounds the penalty keys Inspect reads per group; a group
// with more is reported with PenaltiesTruncated set, and Complete fails.
const MaxPenaltyKeys = 10_000

// MaxGroups bounds the groups Inspect finds when none is named; with more,
// Inspect fails with ErrIncomplete (name the groups to read).
const MaxGroups = 1_000

// MaxFaults bounds the replica faults Inspect reads; with more, Faults is
// cut and FaultsTruncated set.
const MaxFaults = 1_000

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
	// Faults are what replicas report they cannot do (subscribe, publish),
	// while they cannot.
	Faults []Fault `json:"faults"`
	// FaultsTruncated is set when more than MaxFaults faults are recorded.
	FaultsTruncated bool `json:"faults_truncated,omitempty"`
	// Groups are the provider groups asked for, or every group found.
	Groups []GroupState `json:"groups"`
}

// Fault is what a replica reports it cannot do, from its key
// {prefix:registry}:fault:<replica>, whose value is "<what>: <error>" and
// which lives about a minute after the replica last failed.
type Fault struct {
	Replica string `json:"replica"`
	// What is "subscribe" or "publish" (or what else the replica wrote).
	What string `json:"what"`
	// Error is the replica's error text.
	Error string `json:"error"`
}

// Meaning says what the fault means for the fleet.
func (f Fault) Meaning() string {
	switch f.What {
	case "subscribe":
		return "it will not hear lifts or other replicas' penalties until it can " +
			"(its breakers stay open after a lift until their own penalty ends)"
	case "publish":
		return "other replicas will not hear of the penalties it learns until it can " +
			"(they find them in Redis only when they next reserve)"
	}
	return "see its logs"
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
	// Rules are the rules whose keys hold state: a paced rule's key lives
	// only until the last slot booked in it has passed, so an idle paced
	// rule is not listed (one whose key lapses while it is read shows as
	// idle).
	Rules []RuleState `json:"rules"`
	// Truncated is set when the group holds more than MaxKeys rule keys:
	// Rules is cut, Penalties is not.
	Truncated bool `json:"truncated,omitempty"`
	// PenaltiesTruncated is set when the group holds more than
	// MaxPenaltyKeys penalty keys: Penalties is cut.
	PenaltiesTruncated bool `json:"penalties_truncated,omitempty"`
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
	// Value is the key's value as read, which a lift compares with the
	// value then in Redis so that it removes only the penalty shown.
	Value string `json:"value"`
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

// Complete returns an error wrapping ErrIncomplete when the snapshot may
// miss a penalty or a fault (a bound was met), nil when it holds them all.
func (s *State) Complete() error {
	var cut []string
	for _, g := range s.Groups {
		if g.PenaltiesTruncated {
			cut = append(cut, fmt.Sprintf("group %q has more than %d penalty keys", g.Group, MaxPenaltyKeys))
		}
	}
	if s.FaultsTruncated {
		cut = append(cut, fmt.Sprintf("more than %d replica faults are recorded", MaxFaults))
	}
	if len(cut) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; only the first were read", ErrIncomplete, strings.Join(cut, ", "))
}

// ErrIncomplete is returned (wrapped) when the state could not be read in
// full: a bound met, so that a penalty or a fault may be missing.
var ErrIncomplete = errors.New("the state could not be read in full")

// ErrNoKeys is returned by Inspect when nothing at all lives under the
// prefix (no group, no replica): most often a wrong prefix.
var ErrNoKeys = errors.New("limiter: no keys under the prefix")
