// This file holds Cluster: several embedded NATS servers joined by cluster routes, for local deployments and fault tests.
package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrCluster is wrapped by Cluster's errors.
var ErrCluster = errors.New("nats cluster")

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Servers is the number of servers (default 3). JetStream replicates a
	// bucket on three of them when there are three or more.
	Servers int
	// Host is where every server listens (default 127.0.0.1).
	Host string
	// ClientPorts and RoutePorts give each server's client and cluster
	// ports; empty picks free ones. A server restarted by Start binds the
	// same ports again, so callers that restart servers should choose
	// ports no outgoing connection can be handed meanwhile (below the
	// kernel's ephemeral range).
	ClientPorts, RoutePorts []int
	// StoreDir holds each server's JetStream store in a subdirectory;
	// empty makes a temporary directory, removed by Close.
	StoreDir string
	// Name is the cluster's name (default "kvrouter").
	Name string
}

// Cluster is a set of embedded NATS servers with JetStream, joined by
// cluster routes, in this process. Each server can be stopped and started
// again on its ports and store, as a failing machine would.
type Cluster struct {
	opts    ClusterOptions
	tempDir string

	mu      sync.Mutex
	servers []*server.Server // nil while stopped
}

// StartCluster starts every server and waits until JetStream is ready on
// each and the cluster has elected its JetStream meta leader.
func StartCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.Servers == 0 {
		opts.Servers = 3
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Name == "" {
		opts.Name = "kvrouter"
	}
	if opts.Servers < 1 {
		return nil, fmt.Errorf("%w: %d servers: want at least 1", ErrCluster, opts.Servers)
	}
	for name, ports := range map[string][]int{"ClientPorts": opts.ClientPorts, "RoutePorts": opts.RoutePorts} {
		if len(ports) != 0 && len(ports) != opts.Servers {
			return nil, fmt.Errorf("%w: %d %s for %d servers", ErrCluster, len(ports), name, opts.Servers)
		}
	}
	c := &Cluster{opts: opts, servers: make([]*server.Server, opts.Servers)}
	if c.opts.StoreDir == "" {
		d, err := os.MkdirTemp("", "kvrouter-nats-cluster-")
		if err != nil {
			return nil, fmt.Errorf("%w: store: %w", ErrCluster, err)
		}
		c.opts.StoreDir, c.tempDir = d, d
	}
	var err error
	if c.opts.ClientPorts == nil {
		if c.opts.ClientPorts, err = freePorts(opts.Host, opts.Servers); err != nil {
			c.Close()
			return nil, err
		}
	}
	if c.opts.RoutePorts == nil {
		if c.opts.RoutePorts, err = freePorts(opts.Host, opts.Servers); err != nil {
			c.Close()
			return nil, err
		}
	}
	// All at once: a JetStream server waits for its peers to form the
	// meta group.
	errs := make([]error, opts.Servers)
	var wg sync.WaitGroup
	for i := range opts.Servers {
		wg.Go(func() { errs[i] = c.Start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.waitJetStream(30 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func freePorts(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("%w: free port: %w", ErrCluster, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Servers is the number of servers, running or not.
func (c *Cluster) Servers() int { return c.opts.Servers }

// URL is server i's client URL.
func (c *Cluster) URL(i int) string {
	return "nats://" + net.JoinHostPort(c.opts.Host, strconv.Itoa(c.opts.ClientPorts[i]))
}

// URLs is every server's client URL, comma-separated, as NATS clients
// take a server list.
func (c *Cluster) URLs() string {
	urls := make([]string, c.opts.Servers)
	for i := range urls {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// Running reports whether server i runs.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i] != nil
}

func (c *Cluster) serverOptions(i int) *server.Options {
	var routes []string
	for j, p := range c.opts.RoutePorts {
		if j != i {
			routes = append(routes, "nats-route://"+net.JoinHostPort(c.opts.Host, strconv.Itoa(p)))
		}
	}
	return &server.Options{
		ServerName:         c.opts.Name + "-" + strconv.Itoa(i),
		Host:               c.opts.Host,
		Port:               c.opts.ClientPorts[i],
		JetStream:          true,
		StoreDir:           filepath.Join(c.opts.StoreDir, strconv.Itoa(i)),
		JetStreamMaxMemory: 256 << 20,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         8 << 20,
		Cluster: server.ClusterOpts{
			Name: c.opts.Name,
			Host: c.opts.Host,
			Port: c.opts.RoutePorts[i],
		},
		Routes: server.RoutesFromStr(strings.Join(routes, ",")),
	}
}

// Start starts server i (again) on its ports and store. It returns once
// the server accepts clients.
func (c *Cluster) Start(i int) error {
	c.mu.Lock()
	running := c.servers[i] != nil
	c.mu.Unlock()
	if running {
		return nil
	}
	srv, err := server.NewServer(c.serverOptions(i))
	if err != nil {
		return fmt.Errorf("%w: server %d: %w", ErrCluster, i, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("%w: server %d on %s did not start (is port %d or %d taken?)", ErrCluster, i, c.URL(i),
			c.opts.ClientPorts[i], c.opts.RoutePorts[i])
	}
	c.mu.Lock()
	c.servers[i] = srv
	c.mu.Unlock()
	return nil
}

// Stop shuts server i down, as a machine that fails would: its clients
// lose their connection and reconnect to the other servers.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	srv := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// waitJetStream waits until every running server is current with the
// JetStream meta group, so that a bucket can be created.
func (c *Cluster) waitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready := true
		c.mu.Lock()
		for _, s := range c.servers {
			if s != nil && (!s.JetStreamEnabled() || (c.opts.Servers > 1 && !s.JetStreamIsCurrent())) {
				ready = false
			}
		}
		c.mu.Unlock()
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: JetStream not ready on every server within %v", ErrCluster, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReady waits until every running server is current with the
// JetStream meta group again, after Start.
func (c *Cluster) WaitReady(timeout time.Duration) error { return c.waitJetStream(timeout) }

// Close stops every server and removes the store if it made it.
func (c *Cluster) Close() {
	for i := range c.opts.Servers {
		c.Stop(i)
	}
	if c.tempDir != "" {
		os.RemoveAll(c.tempDir)
	}
}
