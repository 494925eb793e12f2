package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// machine is what every table states about where it was measured.
type machine struct {
	cores   int
	cpu     string
	goVer   string
	redis   string
	osArch  string
	date    time.Time
	loadAvg string // at the start of the run: other work on the machine skews numbers
}

func (m machine) String() string {
	return fmt.Sprintf("%d cores (%s), %s, %s, Redis %s, %s UTC, load average at start %s",
		m.cores, m.cpu, m.osArch, m.goVer, m.redis, m.date.Format("2006-01-02 15:04"), m.loadAvg)
}

func describeMachine(ctx context.Context, rdb *redis.Client) (machine, error) {
	m := machine{
		cores:  runtime.NumCPU(),
		cpu:    cpuModel(),
		goVer:  runtime.Version(),
		osArch: runtime.GOOS + "/" + runtime.GOARCH,
		date:   time.Now().UTC(),
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return m, fmt.Errorf("redis INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			m.redis = v
		}
	}
	m.loadAvg = "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.loadAvg = strings.Join(f[:3], " ")
		}
	}
	return m, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "CPU model not readable"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "CPU model not readable"
}
