package dingtalkofficial

import (
	"net/http"
	"time"

	openapi "github.com/alibabacloud-go/darabonba-openapi/v2/client"
	"github.com/alibabacloud-go/tea/dara"
	"github.com/quotaware/throttle/integrations/internal/checkrt"
)

// HTTPClient adapts an *http.Client to the SDK's dara.HttpClient: the SDK
// calls Call with the request and a transport it built for it, which is
// ignored in favour of Client's.
type HTTPClient struct {
	Client *http.Client
}

var _ dara.HttpClient = HTTPClient{}

// Call sends req through Client.
func (c HTTPClient) Call(req *http.Request, _ *http.Transport) (*http.Response, error) {
	return c.Client.Do(req)
}

// Config returns the openapi.Config of the SDK's clients (contact.NewClient,
// oauth2_1_0.NewClient and the rest) with every call sent through rt over
// HTTPS, with no time bound: the SDK's ReadTimeout, ConnectTimeout, proxy
// and TLS settings apply to the transport it builds, which the adapter
// ignores, and it passes no context. Prefer ConfigWithTimeout. It panics
// when rt is nil.
func Config(rt http.RoundTripper) *openapi.Config {
	return ConfigWithTimeout(rt, 0)
}

// ConfigWithTimeout is Config with every call bounded by timeout (the
// http.Client's Timeout: the wait for a slot, the send and reading the
// answer), so that a provider that hangs does not hang the call. Zero
// means no bound (as a negative one does for http.Client). It panics when
// rt is nil: every call would go unthrottled.
func ConfigWithTimeout(rt http.RoundTripper, timeout time.Duration) *openapi.Config {
	checkrt.Transport("dingtalkofficial.ConfigWithTimeout", rt)
	protocol, region := "https", "central"
	return &openapi.Config{
		Protocol:   &protocol,
		RegionId:   &region,
		HttpClient: HTTPClient{Client: &http.Client{Transport: rt, Timeout: timeout}},
	}
}
