package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of every Redis Cluster.
const clusterSlots = 16384

// busOffset is how far above its client port a node listens for the cluster
// bus; Redis before 7 has no setting for it, so both ports must be free.
const busOffset = 10000

// NodeTimeout is the cluster-node-timeout of the nodes StartCluster starts:
// short, so that KillMaster's automatic failover takes seconds, yet long
// enough that a node busy under the race detector is not voted out.
const NodeTimeout = 2 * time.Second

// formTimeout bounds how long forming or healing a cluster may take.
const formTimeout = 30 * time.Second

// Cluster is a Redis Cluster of redis-server processes on loopback, formed
// with cluster commands through go-redis (no redis-cli needed).
type Cluster struct {
	dir   string
	nodes []*clusterNode

	mu      sync.Mutex
	masters []string // current masters, in slot order
}

type clusterNode struct {
	srv   *Server
	id    string
	admin *redis.Client
	dead  bool // killed by KillMaster (guarded by Cluster.mu)
}

// StartCluster starts masters × (1 + replicasPerMaster) nodes, spreads the
// 16384 slots evenly over the masters, attaches replicasPerMaster replicas to
// each, and returns once every node reports cluster_state:ok, knows every
// other node and agrees on the slot map (masters and replicas). The cluster
// stops at the test's cleanup.
//
// Without redis-server the test is skipped, or fails under
// THROTTLE_REQUIRE_REDIS=1.
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	if testing.Short() {
		tb.Skip("a Redis Cluster takes seconds to start: make test runs it, make test-short does not")
	}
	tb.Helper()
	if masters < 1 || replicasPerMaster < 0 {
		tb.Fatalf("redistest: StartCluster(%d, %d): want at least one master and no negative replica count", masters, replicasPerMaster)
	}
	bin := need(tb)
	c, err := NewCluster(bin, tb.TempDir(), masters, replicasPerMaster)
	if c != nil {
		tb.Cleanup(c.Stop)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// NewCluster is StartCluster outside a test (the comparison tool's cluster
// runs): bin is redis-server, dir holds the nodes' files. The caller stops
// it; on an error the nodes started are stopped already.
func NewCluster(bin, dir string, masters, replicasPerMaster int) (*Cluster, error) {
	c := &Cluster{dir: dir}
	n := masters * (1 + replicasPerMaster)
	for i := 0; i < n; i++ {
		srv, err := startClusterNode(bin, c.dir)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes = append(c.nodes, &clusterNode{srv: srv, admin: adminClient(srv.Addr)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	if err := c.form(ctx, masters, replicasPerMaster); err != nil {
		err = fmt.Errorf("redistest: forming a %d-master cluster with %d replicas each: %v\n%s", masters, replicasPerMaster, err, c.describe())
		c.Stop()
		return nil, err
	}
	return c, nil
}

func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, PoolSize: 2,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second,
	})
}

// startClusterNode starts one cluster-enabled node on a port whose bus port
// (port+10000) is free too, choosing new ports when either is taken.
func startClusterNode(bin, dir string) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		port, err := freePortWithBus()
		if err != nil {
			lastErr = err
			continue
		}
		p := strconv.Itoa(port)
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", p), bin: bin, dir: dir}
		// The same base arguments as NewServer, which cannot be told the
		// port to use.
		s.args = []string{
			"--port", p, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no", "--daemonize", "no",
			"--logfile", filepath.Join(dir, "redis-"+p+".log"),
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
			// A new replica syncs at once instead of waiting 5 s for
			// more replicas to share the transfer.
			"--repl-diskless-sync-delay", "0",
			// CLUSTER SLOTS lists a replica only once its replication
			// offset is above zero, which on an idle master takes the
			// first replication ping: every second instead of every 10.
			"--repl-ping-replica-period", "1",
		}
		if lastErr = s.run(0); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: no cluster node started after 20 attempts: %w", lastErr)
}

// freePortWithBus returns a free loopback port p whose bus port p+10000 is
// free as well.
func freePortWithBus() (int, error) {
	for i := 0; i < 100; i++ {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		if port+busOffset > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+busOffset)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port with a free bus port (port+10000)")
}

func (c *Cluster) form(ctx context.Context, masters, replicas int) error {
	for _, n := range c.nodes {
		id, err := n.admin.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", n.srv.Addr, err)
		}
		n.id = id
	}
	for i := 0; i < masters; i++ {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if err := addSlotsRange(ctx, c.nodes[i].admin, lo, hi); err != nil {
			return fmt.Errorf("assigning slots %d-%d to %s: %w", lo, hi, c.nodes[i].srv.Addr, err)
		}
		c.masters = append(c.masters, c.nodes[i].srv.Addr)
	}
	// Distinct config epochs, as redis-cli assigns them, spare the nodes
	// resolving a collision over gossip before the slot map settles; and
	// every node meeting every other spares them learning of each other by
	// gossip. Both only make the cluster ready sooner.
	for i, n := range c.nodes {
		if err := n.admin.Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", n.srv.Addr, err)
		}
	}
	for i, a := range c.nodes {
		for _, b := range c.nodes[i+1:] {
			host, port, _ := net.SplitHostPort(b.srv.Addr)
			if err := a.admin.ClusterMeet(ctx, host, port).Err(); err != nil {
				return fmt.Errorf("CLUSTER MEET %s from %s: %w", b.srv.Addr, a.srv.Addr, err)
			}
		}
	}
	// A replica can only follow a master it knows, so wait for the
	// handshakes before CLUSTER REPLICATE.
	if err := c.waitFor(ctx, "every node to know every other", c.allKnown); err != nil {
		return err
	}
	for i := 0; i < masters; i++ {
		for r := 0; r < replicas; r++ {
			replica := c.nodes[masters+i*replicas+r]
			if err := replica.admin.ClusterReplicate(ctx, c.nodes[i].id).Err(); err != nil {
				return fmt.Errorf("CLUSTER REPLICATE on %s: %w", replica.srv.Addr, err)
			}
		}
	}
	return c.waitFor(ctx, "the cluster to be ok", func(ctx context.Context) error {
		return c.healthy(ctx, "", -1)
	})
}

// addSlotsRange uses CLUSTER ADDSLOTSRANGE (Redis 7), falling back to
// CLUSTER ADDSLOTS with every slot listed for older servers. go-redis's
// ClusterAddSlotsRange always sends the long form.
func addSlotsRange(ctx context.Context, c *redis.Client, lo, hi int) error {
	err := c.Do(ctx, "cluster", "addslotsrange", lo, hi).Err()
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
		err = c.ClusterAddSlotsRange(ctx, lo, hi).Err()
	}
	return err
}

// waitFor polls check until it passes or ctx ends.
func (c *Cluster) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(backoff): // polling external processes: nothing to wait on
		}
	}
}

func (c *Cluster) live() []*clusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*clusterNode, 0, len(c.nodes))
	for _, n := range c.nodes {
		if !n.dead {
			out = append(out, n)
		}
	}
	return out
}

// allKnown checks that every node lists every node, none still in handshake.
func (c *Cluster) allKnown(ctx context.Context) error {
	for _, n := range c.nodes {
		text, err := n.admin.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: %w", n.srv.Addr, err)
		}
		known := 0
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") {
				continue
			}
			known++
		}
		if known != len(c.nodes) {
			return fmt.Errorf("%s knows %d of %d nodes", n.srv.Addr, known, len(c.nodes))
		}
	}
	return nil
}

// healthy checks every live node: cluster_state:ok, all slots assigned, and
// the same slot map everywhere, with each master's live replicas listed
// (replication links up). When owner is set, slot must belong to it.
func (c *Cluster) healthy(ctx context.Context, owner string, slot int) error {
	live := c.live()
	var want string
	for _, n := range live {
		info, err := n.admin.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.srv.Addr, err)
		}
		for _, kv := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_fail:0", "cluster_slots_pfail:0"} {
			if !strings.Contains(info, kv+"\r\n") && !strings.HasSuffix(strings.TrimSpace(info), kv) {
				return fmt.Errorf("%s: CLUSTER INFO lacks %s", n.srv.Addr, kv)
			}
		}
		slots, err := n.admin.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SLOTS: %w", n.srv.Addr, err)
		}
		got := slotMap(slots)
		if want == "" {
			want = got
		} else if got != want {
			return fmt.Errorf("slot maps differ:\n%s: %s\n%s: %s", live[0].srv.Addr, want, n.srv.Addr, got)
		}
		if owner != "" {
			if o := ownerOf(slots, slot); o != owner {
				return fmt.Errorf("%s: slot %d belongs to %s, want %s", n.srv.Addr, slot, o, owner)
			}
		}
	}
	// Every live node is a master of the map or one of its replicas with
	// the replication link up: a replica still syncing cannot fail over.
	inMap := map[string]bool{}
	for _, part := range strings.Split(want, "|") {
		_, addrs, _ := strings.Cut(part, " ")
		for _, a := range strings.Split(addrs, ",") {
			inMap[a] = true
		}
	}
	for _, n := range live {
		role, err := n.admin.Do(ctx, "role").Slice()
		if err != nil {
			return fmt.Errorf("%s: ROLE: %w", n.srv.Addr, err)
		}
		if !inMap[n.srv.Addr] {
			return fmt.Errorf("%s (%v) is not in the slot map %s", n.srv.Addr, role, want)
		}
		if len(role) > 0 && role[0] == "slave" && (len(role) < 4 || role[3] != "connected") {
			return fmt.Errorf("%s: replica link %v", n.srv.Addr, role)
		}
	}
	return nil
}

// slotMap renders CLUSTER SLOTS canonically: "lo-hi master,replica...|...".
func slotMap(slots []redis.ClusterSlot) string {
	parts := make([]string, 0, len(slots))
	for _, s := range slots {
		addrs := make([]string, 0, len(s.Nodes))
		for _, n := range s.Nodes {
			addrs = append(addrs, n.Addr)
		}
		if len(addrs) > 1 {
			slices.Sort(addrs[1:])
		}
		parts = append(parts, fmt.Sprintf("%d-%d %s", s.Start, s.End, strings.Join(addrs, ",")))
	}
	slices.Sort(parts)
	return strings.Join(parts, "|")
}

func ownerOf(slots []redis.ClusterSlot, slot int) string {
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}

// describe renders each node's view, for failure messages.
func (c *Cluster) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var b strings.Builder
	for _, n := range c.live() {
		info, _ := n.admin.ClusterInfo(ctx).Result()
		nodes, _ := n.admin.ClusterNodes(ctx).Result()
		state := "?"
		for _, l := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(l, "cluster_state:") {
				state = l
			}
		}
		fmt.Fprintf(&b, "node %s (%s):\n%s", n.srv.Addr, state, nodes)
	}
	return b.String()
}

// Addrs returns the address of every node started, masters first; a
// cluster client needs only one that answers.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.srv.Addr
	}
	return out
}

// Masters returns the addresses of the current masters (after Failover or
// KillMaster, the promoted replica in place of its master).
func (c *Cluster) Masters() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.masters)
}

// ClientReloadInterval is the ClusterStateReloadInterval of the clients
// Client returns. go-redis reloads the slot map on MOVED, but a refused
// connection only makes it retry the same dead master; after KillMaster it
// learns of the promoted replica only at its next periodic reload, 60 s by
// default.
const ClientReloadInterval = time.Second

// Client returns a cluster client seeded with every node, closed at cleanup.
// See ClientReloadInterval.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: ClientReloadInterval})
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// Slot returns the hash slot of key, as the cluster computes it (hash tags
// included).
func (c *Cluster) Slot(tb testing.TB, key string) int {
	tb.Helper()
	for _, n := range c.live() {
		slot, err := n.admin.ClusterKeySlot(context.Background(), key).Result()
		if err == nil {
			return int(slot)
		}
	}
	tb.Fatalf("redistest: no live node answers CLUSTER KEYSLOT %q", key)
	return -1
}

// Stop kills every node and closes the admin connections. It is safe to
// call more than once.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.admin.Close()
			n.srv.Stop()
		}()
	}
	wg.Wait()
}
