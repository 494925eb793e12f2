package wecomtest

import (
	"encoding/json"
	"strings"
	"time"
)

// memberAPI sends an app message, limited per member.
const memberAPI = "/cgi-bin/message/send"

// appMessage is what the emulator reads of an app message.
type appMessage struct {
	ToUser  string      `json:"touser"`
	ToParty string      `json:"toparty"`
	ToTag   string      `json:"totag"`
	AgentID json.Number `json:"agentid"`
}

// deliverLocked counts an accepted app message against each recipient's
// per-member windows and returns how many recipients were over a limit (to
// whom WeCom silently does not deliver it).
func (s *Server) deliverLocked(corp string, m appMessage, emu time.Time) int {
	l := s.opts.Limits
	seen := map[string]bool{}
	var members []string
	reach := func(ids ...string) {
		for _, id := range ids {
			if id = strings.ToLower(strings.TrimSpace(id)); id != "" && !seen[id] {
				seen[id] = true
				members = append(members, id)
			}
		}
	}
	for _, u := range strings.Split(m.ToUser, "|") {
		if u == "@all" {
			reach(s.opts.Members...)
		} else {
			reach(u)
		}
	}
	for _, g := range []struct {
		ids  string
		dir  map[string][]string
		kind string
	}{{m.ToParty, s.opts.Parties, "party:"}, {m.ToTag, s.opts.Tags, "tag:"}} {
		for _, id := range strings.Split(g.ids, "|") {
			if ms, ok := g.dir[id]; ok {
				reach(ms...)
			} else if id != "" {
				reach(g.kind + id)
			}
		}
	}
	dropped := 0
	for _, member := range members {
		id := corp + "\x00" + m.AgentID.String() + "\x00" + member
		over := false
		var ws []*window
		for _, c := range []struct {
			limit  int
			window time.Duration
		}{{l.PerMemberPerMinute, time.Minute}, {l.PerMemberPerHour, time.Hour}} {
			if c.limit <= 0 {
				continue
			}
			k := key{dim: 'u', id: id, window: c.window}
			w := s.windows[k]
			if w == nil {
				w = &window{}
				s.windows[k] = w
			}
			if start := emu.Truncate(c.window); !w.start.Equal(start) {
				w.start, w.n = start, 0
			}
			over = over || w.n >= c.limit
			ws = append(ws, w)
		}
		if over {
			dropped++
			continue
		}
		for _, w := range ws {
			w.n++
		}
	}
	return dropped
}
