package wecom

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers/internal/bodyscan"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
)

// memberAPI sends an app message. WeCom delivers at most PerMemberPerMinute
// and PerMemberPerHour of one app's messages to one member and drops the
// rest without an error, so the preset must keep under them.
const memberAPI = "/cgi-bin/message/send"

// maxMembers bounds how many members of a touser list get rules of their
// own; a longer list goes to the shared rules.
const maxMembers = 8

// broadcast names the company's shared member rules: what a message sends
// to members the preset cannot name ("@all", a party, a tag, a long list,
// a body not read whole, an app it cannot tell) is charged there.
const broadcast = "broadcast"

// memberBookAhead is how far ahead a message may book its members' slots
// (and with them the shared corp and IP rules): short, so another member's
// message waits at most that long behind it, and enough for the Transport
// to let a member's older waiters ask first.
const memberBookAhead = 50 * time.Millisecond

// The members an app message reaches are split into two budgets, so that
// no way of addressing a member can deliver more to it than its limits:
//
//   - a member named in touser, of a known app, is charged to that app's
//     rules for the member, which allow PerMember less Broadcast;
//   - everything the preset cannot attribute to named members of a known
//     app is charged to the company's broadcast rules, which allow
//     Broadcast: "@all", a party or tag (WeCom delivers to each of their
//     members), a list longer than maxMembers, an agentid missing, repeated
//     or unreadable, and any body not read whole (a member it did not see
//     may name someone else), beside the members it did read.
//
// A member thus gets at most (PerMember - Broadcast) directly plus
// Broadcast through every other way together: PerMember. Charging the
// unattributed sends to one shared key alone would double a member's
// budget; charging every named send to the shared key as well would cap the
// whole app at one member's rate.

// memberRules returns the per-member rules of an app message.
func (p *preset) memberRules(r *http.Request) ([]rule.Rule, error) {
	fields, whole := bodyscan.Read(r, p.cfg.MemberPeekLimit, 16, "touser", "toparty", "totag", "agentid")
	var members []string
	shared := !whole
	agent, agents := "", 0
	for _, f := range fields {
		switch f.Name {
		case "touser":
			if f.Kind != jsoncode.String {
				shared = true
				continue
			}
			for _, m := range strings.Split(f.Value, "|") {
				switch m = normalMember(m); {
				case m == "":
				case m == "@all":
					shared = true
				case !slices.Contains(members, m):
					members = append(members, m)
				}
			}
		case "toparty", "totag":
			if f.Kind != jsoncode.Literal || f.Value != "null" {
				if f.Kind != jsoncode.String || strings.Trim(f.Value, " |") != "" {
					shared = true // reaches members the preset cannot name
				}
			}
		case "agentid":
			if a := normalAgent(f.Value); a != agent {
				agent, agents = a, agents+1
			}
		}
	}
	if agents != 1 || !validAgent(agent) {
		shared, members = true, nil // whose budget is it? the company's shared one
	}
	if len(members) > maxMembers {
		shared, members = true, nil
	}
	if len(members) == 0 {
		shared = true // nothing named: WeCom refuses it, but it costs the shared budget if not
	}
	rules := make([]rule.Rule, 0, 2*len(members)+2)
	add := func(tpl [2]rule.Rule, key string) error {
		for i, t := range tpl {
			rl, err := t.WithKey("member:" + "mh"[i:i+1] + ":" + p.cfg.CorpID + ":" + key)
			if err != nil {
				return err
			}
			rules = append(rules, rl)
		}
		return nil
	}
	for _, m := range members {
		if err := add([2]rule.Rule{p.memberMinute, p.memberHour}, agent+":"+p.memberHash(m)); err != nil {
			return nil, err
		}
	}
	if shared {
		if err := add([2]rule.Rule{p.broadcastMinute, p.broadcastHour}, broadcast); err != nil {
			return nil, err
		}
	}
	return rules, nil
}

// normalMember writes a member's UserID as WeCom compares it: without
// regard to case (WeCom ignores case when it checks that UserIDs are unique,
// so "Alice" and "alice" are one member) and without surrounding spaces (an
// assumption: trimming can only merge keys, never split a member's).
func normalMember(m string) string {
	return strings.ToLower(strings.TrimSpace(m))
}

// normalAgent writes an agentid as a number decodes: 1000002, "1000002"
// and "01000002" are one app.
func normalAgent(a string) string {
	a = strings.TrimSpace(a)
	for len(a) > 1 && a[0] == '0' {
		a = a[1:]
	}
	return a
}

// validAgent accepts an agentid as WeCom issues them: a decimal number.
func validAgent(a string) bool {
	if a == "" || len(a) > 20 {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] < '0' || a[i] > '9' {
			return false
		}
	}
	return true
}

// memberHash names a member in keys: a keyed hash (Config.EntityKey), as
// UserIDs are names ("zhangsan") that a dictionary would find.
func (p *preset) memberHash(m string) string {
	return p.entities.Sum("member", m)
}
