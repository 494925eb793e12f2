package learnedhash

import (
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
)

// TestMain stops the shared redis-server the tests started, which would
// otherwise outlive the test binary.
func TestMain(m *testing.M) { redistest.Main(m) }
