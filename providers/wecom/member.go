package wecom

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
)

// memberAPI sends an app message. WeCom delivers at most PerMemberPerMinute
// and PerMemberPerHour of one app's messages to one member and drops the
// rest without an error, so the preset must keep under them.
const memberAPI = "/cgi-bin/message/send"

// maxMembers bounds how many members of a touser list get rules of their
// own; a longer list, "@all", a party or tag, or a body Route cannot read
// counts as one shared broadcast of the app, which reaches every member and
// so must stay within one member's limits.
const maxMembers = 8

const broadcast = "broadcast"

// memberBookAhead is how far ahead a message may book its members' slots
// (and with them the shared corp and IP rules): short, so another member's
// message waits at most that long behind it, and enough for the Transport
// to let a member's older waiters ask first.
const memberBookAhead = 50 * time.Millisecond

// memberRules returns the per-member rules of an app message.
func (p *preset) memberRules(r *http.Request) ([]rule.Rule, error) {
	prefix, _ := providers.PeekRequestBody(r, p.cfg.MemberPeekLimit)
	var touser, agent string
	jsoncode.Scan(prefix, func(k []byte, kind jsoncode.ValueKind, v []byte) bool {
		switch string(k) {
		case "touser":
			if kind == jsoncode.String {
				touser = jsoncode.Unquote(v)
			}
		case "agentid":
			if kind == jsoncode.Literal || kind == jsoncode.String {
				agent = string(v)
			}
		}
		return touser == "" || agent == ""
	})
	members := strings.Split(touser, "|")
	if touser == "" || touser == "@all" || len(members) > maxMembers || len(agent) > 20 {
		members = []string{broadcast}
	}
	rules := make([]rule.Rule, 0, 2*len(members))
	for _, m := range members {
		id := broadcast
		if m != broadcast {
			sum := sha256.Sum256([]byte(m))
			id = hex.EncodeToString(sum[:12])
		}
		for i, t := range [2]rule.Rule{p.memberMinute, p.memberHour} {
			rl, err := t.WithKey("member:" + "mh"[i:i+1] + ":" + p.cfg.CorpID + ":" + agent + ":" + id)
			if err != nil {
				return nil, err
			}
			rules = append(rules, rl)
		}
	}
	return rules, nil
}
