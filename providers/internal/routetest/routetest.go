package routetest

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/catalog"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// IDs are identifiers of the shapes the providers hand out and callers put
// in paths: letters only (pinyin user IDs, union IDs), mixed case, digits,
// UUIDs, base64-like tokens, emails, escaped and non-ASCII text, very long.
var IDs = []string{
	"zhangsan", "liSiSi", "iSbBkOmHmRLXxDsiPiSdUyQiEiE", "manager4220", "0123456789",
	"550e8400-e29b-41d4-a716-446655440000", "dGhpcyBpcyBiYXNlNjQ+Lw==", "user@example.com",
	"a%2Fb%20c", "张三", "ou_7d8a6e6df7621556ce0d21922b676706ccs", "om_dc13264520392913993dd051dba21dcf",
	"+8613800138000", "a.b-c_d~e", "UPPERCASE", "x", strings.Repeat("LongId", 60),
}

// Fill returns a request's method and path for template with every
// parameter set to id ("" when the template names no method).
func Fill(template, id string) (method, path string) {
	method, path, ok := strings.Cut(template, " ")
	if !ok {
		method, path = "", template
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if catalog.IsParam(s) {
			segs[i] = id
		}
	}
	return method, strings.Join(segs, "/")
}

// Checker routes requests through one profile and checks each.
type Checker struct {
	Profile providers.Profile
	Host    string
	// Templates are the catalog's; each maps to itself.
	Templates []string
	// APIName maps a template to the API name Route should give (nil: the
	// template itself).
	APIName  func(template string) string
	literals map[string]bool
}

// usable reports whether id can stand for a parameter: one non-empty
// segment that no template has as a literal (that would be another API).
func (c *Checker) usable(id string) bool {
	if c.literals == nil {
		c.literals = map[string]bool{}
		for _, t := range c.Templates {
			_, path := Fill(t, "")
			for _, s := range strings.Split(path, "/") {
				c.literals[s] = true
			}
		}
	}
	// "." and ".." are no IDs: the front ends resolve them, as the
	// catalogs do (apipath.Clean).
	return id != "" && id != "." && id != ".." && !strings.Contains(id, "/") && !c.literals[id]
}

func (c *Checker) route(t testing.TB, method, path string) providers.Route {
	t.Helper()
	if method == "" {
		method = http.MethodPost
	}
	req := &http.Request{Method: method, URL: &url.URL{Scheme: "https", Host: c.Host, Path: path}, Host: c.Host, Header: http.Header{}}
	r, err := c.Profile.Route(req)
	if err != nil {
		t.Fatalf("Route(%s %q): %v", method, path, err)
	}
	return r
}

// Check routes template with id in every parameter and fails t unless the
// request is the template's API, with the same rule keys and scopes as with
// any other ID, none of which holds id (a per-entity key holds its hash).
func (c *Checker) Check(t testing.TB, template, id string) {
	t.Helper()
	if !c.usable(id) {
		return
	}
	want := template
	if c.APIName != nil {
		want = c.APIName(template)
	}
	method, path := Fill(template, id)
	got := c.route(t, method, path)
	if got.API != want || got.Uncatalogued {
		t.Fatalf("%s %q: API %q (uncatalogued %v), want %q", method, path, got.API, got.Uncatalogued, want)
	}
	method, refPath := Fill(template, "ref0")
	ref := c.route(t, method, refPath)
	if !slices.Equal(shared(ruleKeys(got), "chat:"), shared(ruleKeys(ref), "chat:")) ||
		!slices.Equal(shared(got.Scopes, scopekind.Entity+":"), shared(ref.Scopes, scopekind.Entity+":")) {
		t.Fatalf("%s %q: keys %q scopes %q, with another ID %q %q", method, path, ruleKeys(got), got.Scopes, ruleKeys(ref), ref.Scopes)
	}
	// An ID that the keys hold whatever the request (a part of the app's
	// name, the template) cannot be told from a leak.
	inRef := func(id string) bool {
		for _, k := range append(ruleKeys(ref), ref.Scopes...) {
			if strings.Contains(k, id) {
				return true
			}
		}
		return false
	}
	if len(id) >= 3 && !strings.Contains(template, id) && !inRef(id) {
		for _, k := range append(ruleKeys(got), append(got.Scopes, got.API)...) {
			if strings.Contains(k, id) {
				t.Fatalf("%s %q: the ID leaks into %q", method, path, k)
			}
		}
	}
}

// CheckAll checks every template with every one of IDs.
func (c *Checker) CheckAll(t *testing.T) {
	for _, tpl := range c.Templates {
		for _, id := range IDs {
			c.Check(t, tpl, id)
		}
	}
}

// Fuzz checks the template picked by pick with a fuzzed ID.
func (c *Checker) Fuzz(f *testing.F) {
	for i, id := range IDs {
		f.Add(uint(i*7919), id)
	}
	f.Fuzz(func(t *testing.T, pick uint, id string) {
		c.Check(t, c.Templates[pick%uint(len(c.Templates))], id)
	})
}

func ruleKeys(r providers.Route) []string {
	keys := make([]string, len(r.Rules))
	for i, rule := range r.Rules {
		keys[i] = rule.Key()
	}
	return keys
}

// shared drops the per-entity entries, which name the ID by its hash.
func shared(s []string, entityPrefix string) []string {
	var out []string
	for _, k := range s {
		if !strings.HasPrefix(k, entityPrefix) {
			out = append(out, k)
		}
	}
	return out
}

// CheckUncatalogued fails t unless paths the catalog lacks, under prefix
// and ending in IDs of every shape, are all the one stand-in API want.
func (c *Checker) CheckUncatalogued(t *testing.T, method, prefix, want string) {
	t.Helper()
	var keys []string
	for _, id := range IDs {
		if strings.Contains(id, "/") {
			continue
		}
		r := c.route(t, method, prefix+id)
		if r.API != want || !r.Uncatalogued {
			t.Fatalf("%s %q: API %q (uncatalogued %v), want %q", method, prefix+id, r.API, r.Uncatalogued, want)
		}
		if keys == nil {
			keys = ruleKeys(r)
		} else if !slices.Equal(keys, ruleKeys(r)) {
			t.Fatalf("%s %q: keys %q, another uncatalogued path has %q", method, prefix+id, ruleKeys(r), keys)
		}
	}
}

// Bench measures routing each of paths (method, path pairs) through the
// profile, one sub-benchmark per path.
func (c *Checker) Bench(b *testing.B, paths [][2]string) {
	for _, path := range paths {
		req := &http.Request{Method: path[0], URL: &url.URL{Scheme: "https", Host: c.Host, Path: path[1]}, Header: http.Header{}}
		b.Run(path[1], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Profile.Route(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
