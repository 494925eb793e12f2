// Command prometheus exports throttle's OpenTelemetry metrics to Prometheus
// with the OpenTelemetry Prometheus exporter, while it calls the in-process
// DingTalk emulator at twice the limit, so that the dashboard
// (ops/grafana/throttle.json) and the alert rules (ops/prometheus/) have
// series to show:
//
//	cd examples/prometheus && go run .          # then: curl -s localhost:9464/metrics | grep throttle_
//
// In a service, the three lines under "export" are all it takes: a
// MeterProvider with the Prometheus exporter as its reader, handed to
// throttle.WithMeterProvider, and promhttp serving the registry.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9464", "where /metrics is served")
	duration := flag.Duration("duration", time.Minute, "how long to call the emulator")
	flag.Parse()

	// export: the Prometheus registry, read through the exporter.
	registry := prometheus.NewRegistry()
	mp, err := meterProvider(registry)
	if err != nil {
		log.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	go func() { log.Fatal(http.ListenAndServe(*listen, nil)) }()
	log.Printf("metrics on http://%s/metrics for %v", *listen, *duration)

	emu := dingtalktest.New(dingtalktest.Options{DefaultApp: "dingprom"})
	defer emu.Close()
	tr, err := newTransport(mp, emu.Host(), http.DefaultTransport)
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	drive(ctx, &http.Client{Transport: tr}, emu.URL, 40)
}

// meterProvider returns an OpenTelemetry MeterProvider whose metrics
// registry exports.
func meterProvider(registry prometheus.Registerer) (*sdkmetric.MeterProvider, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), nil
}

// newTransport is the Transport a service would build, recording into mp.
func newTransport(mp *sdkmetric.MeterProvider, host string, base http.RoundTripper) (*throttle.Transport, error) {
	return throttle.New(
		throttle.WithBase(base),
		throttle.WithMeterProvider(mp),
		throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{host}, Apps: []dingtalk.App{{AppKey: "dingprom"}}}).Profile()),
		throttle.WithMaxWait(200*time.Millisecond), // short, so that some calls are throttled
	)
}

// drive calls one API at perSecond until ctx ends.
func drive(ctx context.Context, c *http.Client, baseURL string, perSecond int) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1.0/contact/users/manager4220", nil)
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}
