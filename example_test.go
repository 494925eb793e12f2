package throttle_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// dingtalkEmulator starts the DingTalk emulator with one known access token.
func dingtalkEmulator() *dingtalktest.Server {
	return dingtalktest.New(dingtalktest.Options{Tokens: map[string]string{"token1": "dingapp"}})
}

// getUser calls the new-generation user API as an SDK would.
func getUser(client *http.Client, emu *dingtalktest.Server) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, emu.URL+"/v1.0/contact/users/manager4220", nil)
	req.Header.Set("x-acs-dingtalk-access-token", "token1")
	return client.Do(req)
}

// Sixty calls at once to one DingTalk API, three times its 20 calls per
// second: the Transport paces them, and the provider (here its emulator)
// rejects none. Without WithRedis the limiter lives in this process.
func Example() {
	emu := dingtalkEmulator()
	defer emu.Close()

	transport := throttle.MustNew(
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingapp"}}}).Profile()),
	)
	defer transport.Close() // on shutdown
	client := &http.Client{Transport: transport}

	answers := make(chan int)
	for range 60 {
		go func() {
			resp, err := getUser(client, emu)
			if err != nil {
				answers <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	ok := 0
	for range 60 {
		if <-answers == http.StatusOK {
			ok++
		}
	}
	st := emu.Stats()
	fmt.Printf("%d of 60 answered 200 OK; the provider rejected %d\n", ok, st.Rejected)
	// Output:
	// 60 of 60 answered 200 OK; the provider rejected 0
}

// A request whose slot lies beyond its budget (WithMaxWait, or the context's
// deadline if sooner) fails at once with a *ThrottledError, which matches
// ErrThrottled; nothing was sent.
func ExampleThrottledError() {
	emu := dingtalkEmulator()
	defer emu.Close()
	client := &http.Client{Transport: throttle.MustNew(
		throttle.WithMaxWait(0), // send now or fail
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingapp", PerAPIRate: 1}}}).Profile()),
	)}

	for range 2 {
		resp, err := getUser(client, emu)
		var te *throttle.ThrottledError
		switch {
		case errors.As(err, &te):
			fmt.Println("refused locally:", errors.Is(err, throttle.ErrThrottled), te.Provider, te.API, te.RetryAfter > 0)
		case err != nil:
			fmt.Println("error:", err)
		default:
			resp.Body.Close()
			fmt.Println("sent:", resp.Status)
		}
	}
	fmt.Println("the provider saw", emu.Stats().Requests, "request")
	// Output:
	// sent: 200 OK
	// refused locally: true dingtalk GET /v1.0/contact/users/{unionId} true
	// the provider saw 1 request
}

// When the provider penalises a scope (here DingTalk bans the egress IP for
// five minutes), the caller gets the provider's answer unchanged, and every
// later request of that scope fails at once with a *PenaltyError, which
// matches ErrPenalized, until the penalty is over.
func ExamplePenaltyError() {
	emu := dingtalkEmulator()
	defer emu.Close()
	client := &http.Client{Transport: throttle.MustNew(
		throttle.WithLogger(slog.New(slog.DiscardHandler)), // the penalty is logged at Info
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingapp"}}}).Profile()),
	)}

	emu.Ban() // as if this IP had exceeded 10,000 calls in 20 s
	resp, err := getUser(client, emu)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("the ban, as DingTalk sent it:", string(body[:len(`{"status":1111`)]))

	_, err = getUser(client, emu)
	var pe *throttle.PenaltyError
	if errors.As(err, &pe) {
		fmt.Println("refused locally:", errors.Is(err, throttle.ErrPenalized), pe.Scope, pe.Code)
	}
	fmt.Println("the provider saw", emu.Stats().Requests, "request")
	// Output:
	// the ban, as DingTalk sent it: {"status":1111
	// refused locally: true egress:default ip-ban
	// the provider saw 1 request
}
