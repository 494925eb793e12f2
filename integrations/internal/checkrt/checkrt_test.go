package checkrt

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle"
)

func TestTransport(t *testing.T) {
	for name, rt := range map[string]http.RoundTripper{
		"nil":       nil,
		"typed nil": (*throttle.Transport)(nil),
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "adapter.F: the RoundTripper is") {
					t.Errorf("%s: recovered %q, want a panic naming the adapter", name, msg)
				}
			}()
			Transport("adapter.F", rt)
		}()
	}
	if rt := Transport("adapter.F", http.DefaultTransport); rt != http.DefaultTransport {
		t.Error("a RoundTripper was not returned as given")
	}
}
