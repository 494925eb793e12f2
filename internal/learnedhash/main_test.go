package learnedhash

import (
	"os"
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
)

// TestMain stops the shared redis-server the tests started, which would
// otherwise outlive the test binary.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}
