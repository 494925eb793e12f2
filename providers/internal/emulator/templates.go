package emulator

import "strings"

// Uncatalogued is the API an emulator counts a path under when it is in
// none of its templates. The providers count such calls by their own
// (unpublished) names; an emulator lumps them together, which is the
// strictest view a test can take of a client's fallback.
const Uncatalogued = "uncatalogued"

// Templates names the API a request calls, from an emulator's own copy of
// the provider's API templates ("METHOD /path" or "/path", parameters
// "{name}" or ":name"). It scans the list segment by segment, preferring
// the template with the most literal segments: slow next to a preset's
// trie, and written apart from it on purpose, so a preset that routes a
// request to the wrong API disagrees with the emulator and a test sees it.
type Templates struct {
	list []template
}

type template struct {
	name, method string
	segs         []string
	literals     int
}

// NewTemplates indexes templates.
func NewTemplates(templates []string) *Templates {
	t := &Templates{list: make([]template, 0, len(templates))}
	for _, name := range templates {
		method, path, ok := strings.Cut(name, " ")
		if !ok {
			method, path = "", name
		}
		tp := template{name: name, method: method, segs: strings.Split(strings.TrimSuffix(path, "/"), "/")}
		for _, s := range tp.segs {
			if !isParam(s) {
				tp.literals++
			}
		}
		t.list = append(t.list, tp)
	}
	return t
}

// Add appends templates (an emulator's options may name more APIs).
func (t *Templates) Add(templates ...string) {
	t.list = append(t.list, NewTemplates(templates).list...)
}

// API returns the name of the template a request matches, or Uncatalogued.
func (t *Templates) API(method, path string) string {
	segs := strings.Split(strings.TrimSuffix(path, "/"), "/")
	best, bestLiterals := Uncatalogued, -1
	for i := range t.list {
		tp := &t.list[i]
		if tp.method != "" && tp.method != method || len(tp.segs) != len(segs) || tp.literals <= bestLiterals {
			continue
		}
		if tp.matches(segs) {
			best, bestLiterals = tp.name, tp.literals
		}
	}
	return best
}

func (tp *template) matches(segs []string) bool {
	for i, s := range tp.segs {
		if isParam(s) {
			if segs[i] == "" {
				return false
			}
		} else if s != segs[i] {
			return false
		}
	}
	return true
}

func isParam(seg string) bool {
	return len(seg) > 1 && (seg[0] == ':' || seg[0] == '{' && seg[len(seg)-1] == '}')
}
