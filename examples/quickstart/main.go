package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

func main() {
	appKey := flag.String("appkey", "dingquickstart", "the DingTalk app key whose limits apply")
	emulator := flag.Bool("emulator", false, "call an in-process DingTalk emulator instead of api.dingtalk.com")
	redisAddr := flag.String("redis", "", "Redis address (host:port) to share the limits with other replicas; empty: this process only")
	flag.Parse()

	baseURL, hosts := "https://api.dingtalk.com", []string(nil)
	if *emulator {
		emu := dingtalktest.New(dingtalktest.Options{DefaultApp: *appKey}) // any token is the app's
		defer emu.Close()
		baseURL, hosts = emu.URL, []string{emu.Host()}
	}

	// The heart of it: one Transport per process, handed to any client or SDK.
	opts := []throttle.Option{
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{
			Hosts: hosts,                             // nil: DingTalk's own hosts
			Apps:  []dingtalk.App{{AppKey: *appKey}}, // one app is a list of one
		}).Profile()),
	}
	if *redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		opts = append(opts, throttle.WithRedis(rdb)) // without it: an in-process limiter
	}
	transport, err := throttle.New(opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer transport.Close()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	start, sent, rejected, failed := time.Now(), 0, 0, 0
	for i := 0; i < 30; i++ {
		req, _ := http.NewRequest(http.MethodGet, baseURL+"/v1.0/contact/users/manager4220", nil)
		req.Header.Set("x-acs-dingtalk-access-token", os.Getenv("DINGTALK_ACCESS_TOKEN"))
		resp, err := client.Do(req)
		switch {
		case errors.Is(err, throttle.ErrThrottled): // no slot within the wait budget: nothing was sent
			log.Print("throttled: ", throttle.RedactError(err)) // the error's URL may carry a token
			continue
		case errors.Is(err, throttle.ErrPenalized): // the provider penalised this scope: nothing was sent
			log.Print("penalized: ", throttle.RedactError(err))
			continue
		case err != nil:
			log.Fatal(throttle.RedactError(err)) // the error's URL may carry a token
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			if limited(resp.StatusCode, body) {
				rejected++
			} else {
				failed++ // a wrong token (401), an unknown user (404): not a limit
			}
			log.Printf("DingTalk answered %d: %s", resp.StatusCode, body)
		}
		sent++
	}
	fmt.Printf("%d calls in %v (%.1f a second), %d rejected by DingTalk for a limit, %d other errors\n",
		sent, time.Since(start).Round(time.Millisecond), float64(sent)/time.Since(start).Seconds(), rejected, failed)
}

// limited reports whether DingTalk refused a call for a limit: a 403 or a
// 429 whose code names one ("Forbidden.AccessDenied.QpsLimitForAppkeyAndApi");
// other 403s (a permission the app lacks) and a 429 "system busy" are not.
func limited(status int, body []byte) bool {
	return (status == http.StatusForbidden || status == http.StatusTooManyRequests) && bytes.Contains(body, []byte("Limit"))
}
