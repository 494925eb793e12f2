package throttle_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every Go block of the README compiles: each is an excerpt of a Go file of
// this module, named in an HTML comment on the line before the block
// (<!-- excerpt: examples/quickstart/main.go -->), which go vet and the
// tests build. The excerpt must appear in that file line for line
// (indentation and blank lines aside), so the README cannot drift from code
// that compiles.
func TestReadmeGoBlocksAreExcerptsOfCompiledFiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)(<!-- excerpt: ([^ ]+) -->\n)?```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("no Go block in the README")
	}
	for i, b := range blocks {
		path, code := string(b[2]), string(b[3])
		if path == "" {
			t.Errorf("Go block %d (%.40q...) names no file it is an excerpt of", i+1, code)
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("Go block %d: %v", i+1, err)
			continue
		}
		if !strings.HasSuffix(path, ".go") {
			t.Errorf("Go block %d: %s is not a Go file", i+1, path)
			continue
		}
		if !containsLines(normalise(string(src)), normalise(code)) {
			t.Errorf("Go block %d is not an excerpt of %s:\n%s", i+1, path, code)
		}
	}
}

// normalise drops indentation and blank lines.
func normalise(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func containsLines(file, excerpt []string) bool {
	for i := 0; i+len(excerpt) <= len(file); i++ {
		match := true
		for j := range excerpt {
			if file[i+j] != excerpt[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
