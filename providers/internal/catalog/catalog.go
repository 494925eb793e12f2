package catalog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/quotaware/throttle/internal/apipath"
)

// API is one template of the catalog.
type API struct {
	// Name is the template as listed: the API's identity in keys, scopes
	// and telemetry. It holds parameter names, never a request's values.
	Name string
	// Method is the template's method, "" for any.
	Method string
	// Path is the template's path.
	Path string
}

// Catalog is an immutable set of templates, safe for concurrent use.
type Catalog struct {
	root node
	n    int
}

type node struct {
	static map[string]*node
	param  *node
	apis   []*API // templates ending here, one per method ("" last)
}

// New builds a catalog. It rejects a template that is not "METHOD /path" or
// "/path", and two templates that would name the same requests.
func New(templates ...string) (*Catalog, error) {
	c := &Catalog{}
	for _, t := range templates {
		if err := c.add(t); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// MustNew is New for the generated catalogs, known to be valid.
func MustNew(templates ...string) *Catalog {
	c, err := New(templates...)
	if err != nil {
		panic(err)
	}
	return c
}

// Len is the number of templates.
func (c *Catalog) Len() int { return c.n }

// IsParam reports whether a template segment is a parameter.
func IsParam(seg string) bool {
	return len(seg) > 1 && (seg[0] == ':' || seg[0] == '{' && seg[len(seg)-1] == '}')
}

func (c *Catalog) add(t string) error {
	method, path := "", t
	if m, p, ok := strings.Cut(t, " "); ok {
		method, path = m, p
		if method == "" || strings.ToUpper(method) != method {
			return fmt.Errorf("catalog: template %q: the method must be upper case", t)
		}
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#") {
		return fmt.Errorf("catalog: template %q: the path must start with '/' and hold no space, '?' or '#'", t)
	}
	if err := CheckPath(path); err != nil {
		return fmt.Errorf("catalog: template %q: the path %w", t, err)
	}
	n := &c.root
	if path != "/" {
		for _, seg := range strings.Split(strings.TrimSuffix(path[1:], "/"), "/") {
			switch {
			case seg == "":
				return fmt.Errorf("catalog: template %q: empty segment", t)
			case IsParam(seg):
				if n.param == nil {
					n.param = &node{}
				}
				n = n.param
			default:
				if n.static == nil {
					n.static = make(map[string]*node)
				}
				next := n.static[seg]
				if next == nil {
					next = &node{}
					n.static[seg] = next
				}
				n = next
			}
		}
	}
	for _, a := range n.apis {
		if a.Method == method {
			return fmt.Errorf("catalog: templates %q and %q name the same requests", a.Name, t)
		}
	}
	a := &API{Name: t, Method: method, Path: path}
	if method == "" {
		n.apis = append(n.apis, a)
	} else {
		n.apis = append([]*API{a}, n.apis...)
	}
	c.n++
	return nil
}

// CheckPath reports why path, an API's path as a preset's configuration
// names it, would match no request, or nil. Lookup reads a request's path
// as the front ends do, through apipath.Clean, and decoded (but for an
// escaped '/'): a path with a "." or ".." segment or an empty one ("//"),
// or with a '%', is never what Lookup compares, so its rules would apply to
// nothing. One trailing slash is allowed: Lookup ignores it, and a
// provider's catalog may list an API with one. The error reads after the
// path's name, e.g. `has a "." or ".." segment: write "/cgi-bin/x"`.
func CheckPath(path string) error {
	if strings.IndexByte(path, '%') >= 0 {
		return errors.New("has a '%': write the path unescaped, as the API's documentation lists it")
	}
	if path == "" || path[0] != '/' {
		return nil // not a path: the callers refuse it in their own words
	}
	clean := apipath.Clean(path)
	if clean == path || clean != "/" && clean+"/" == path {
		return nil
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("has a \".\" or \"..\" segment: write %q", clean)
		}
	}
	return fmt.Errorf("has an empty segment: write %q", clean)
}

// Lookup returns the template a request's method and path (no query) call,
// or nil when none does. The path is read as the providers' front ends
// read it: repeated slashes merged, "." and ".." resolved, a trailing
// slash ignored ("//topapi/./v2/user/get//" is /topapi/v2/user/get: read
// apart, it escaped the API's rules and the monthly quota).
func (c *Catalog) Lookup(method, p string) *API {
	if c == nil || p == "" || p[0] != '/' {
		return nil
	}
	p = apipath.Clean(p)
	rest := p[1:]
	if rest == "" {
		return c.root.api(method)
	}
	return c.root.match(rest, method)
}

func (n *node) match(rest, method string) *API {
	seg, tail, more := strings.Cut(rest, "/")
	if seg == "" {
		return nil
	}
	if next := n.static[seg]; next != nil {
		if a := next.descend(tail, more, method); a != nil {
			return a
		}
	}
	if n.param != nil {
		return n.param.descend(tail, more, method)
	}
	return nil
}

func (n *node) descend(tail string, more bool, method string) *API {
	if !more {
		return n.api(method)
	}
	return n.match(tail, method)
}

func (n *node) api(method string) *API {
	for _, a := range n.apis {
		if a.Method == method || a.Method == "" {
			return a
		}
	}
	return nil
}

// Uncatalogued is the API a preset routes a path to when its catalog knows
// none: one conservative stand-in per app, never split by what the path
// holds, so a new API is over-throttled a little rather than IDs making
// many APIs of one.
const Uncatalogued = "uncatalogued"

// Find names the API of method and path in the first of cats that knows
// it (a preset's configured APIs first, then the provider's), or returns
// Uncatalogued and false: every path no catalog knows is one API, so IDs in
// paths never make many.
func Find(method, path string, cats ...*Catalog) (string, bool) {
	for _, c := range cats {
		if a := c.Lookup(method, path); a != nil {
			return a.Name, true
		}
	}
	return Uncatalogued, false
}
