package dingtalkofficial

import (
	"net/http"

	openapi "github.com/alibabacloud-go/darabonba-openapi/v2/client"
	"github.com/alibabacloud-go/tea/dara"
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
// HTTPS.
func Config(rt http.RoundTripper) *openapi.Config {
	protocol, region := "https", "central"
	return &openapi.Config{
		Protocol:   &protocol,
		RegionId:   &region,
		HttpClient: HTTPClient{Client: &http.Client{Transport: rt}},
	}
}
