// This file holds the faults a test injects into a running cluster: processes killed, frozen and restarted, NATS servers stopped.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ErrNoSuch is returned for an engine, router or server index out of range.
var ErrNoSuch = errors.New("cluster: no such process")

func (c *Cluster) engineIndex(i int) error {
	if i < 0 || i >= len(c.engines) {
		return fmt.Errorf("%w: engine %d of %d", ErrNoSuch, i, len(c.engines))
	}
	return nil
}

// kill ends p's process group at once, as a crash would, and reaps it.
func kill(p *proc) {
	p.stopped = true // its exit is no failure
	killGroup(p.cmd.Process, syscall.SIGKILL)
	<-p.done
}

// replace puts q where p was among the processes Stop ends.
func (c *Cluster) replace(p, q *proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.procs {
		if c.procs[i] == p {
			c.procs[i] = q
			return
		}
	}
	c.procs = append(c.procs, q)
}

// EngineRunning reports whether engine i's process runs (frozen counts).
func (c *Cluster) EngineRunning(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.engineProcs[i].exited()
}

// AgentRunning reports whether engine i's agent runs.
func (c *Cluster) AgentRunning(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.agentProcs[i].exited()
}

// KillEngine ends engine i with SIGKILL. Its agent stays.
func (c *Cluster) KillEngine(i int) error {
	if err := c.engineIndex(i); err != nil {
		return err
	}
	c.mu.Lock()
	p := c.engineProcs[i]
	c.mu.Unlock()
	kill(p)
	return nil
}

// RestartEngine starts engine i again, on its ports and with empty caches,
// and waits until it answers /health. It kills the old process first if
// it still runs.
func (c *Cluster) RestartEngine(ctx context.Context, i int) error {
	if err := c.engineIndex(i); err != nil {
		return err
	}
	c.mu.Lock()
	old := c.engineProcs[i]
	c.mu.Unlock()
	if !old.exited() {
		kill(old)
	}
	e := c.engines[i]
	p, err := startProc(c.bin, c.logDir, "engine-"+e.ID, engineArgs(&c.opts, e))
	if err != nil {
		return err
	}
	c.replace(old, p)
	c.mu.Lock()
	c.engineProcs[i] = p
	c.engines[i].PID = p.PID()
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	for !healthy(ctx, e.URL+"/health") {
		if p.exited() {
			return p.failure("exited while restarting")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: engine %s not healthy after a restart: %w", e.ID, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
	return nil
}

// FreezeEngine stops engine i's process (SIGSTOP): it holds its
// connections and answers nothing until ThawEngine.
func (c *Cluster) FreezeEngine(i int) error { return c.signalEngine(i, syscall.SIGSTOP) }

// ThawEngine resumes a frozen engine (SIGCONT).
func (c *Cluster) ThawEngine(i int) error { return c.signalEngine(i, syscall.SIGCONT) }

func (c *Cluster) signalEngine(i int, sig syscall.Signal) error {
	if err := c.engineIndex(i); err != nil {
		return err
	}
	c.mu.Lock()
	p := c.engineProcs[i]
	c.mu.Unlock()
	if p.exited() {
		return fmt.Errorf("%w: engine %d exited", ErrNoSuch, i)
	}
	signalGroup(p.cmd.Process, sig)
	return nil
}

// KillAgent ends engine i's agent with SIGKILL: its registration lapses
// after its lease unless it is restarted first.
func (c *Cluster) KillAgent(i int) error {
	if err := c.engineIndex(i); err != nil {
		return err
	}
	c.mu.Lock()
	p := c.agentProcs[i]
	c.mu.Unlock()
	kill(p)
	return nil
}

// RestartAgent starts engine i's agent again (killing the old one if it
// runs), on a NATS server that runs.
func (c *Cluster) RestartAgent(i int) error {
	if err := c.engineIndex(i); err != nil {
		return err
	}
	c.mu.Lock()
	old := c.agentProcs[i]
	c.mu.Unlock()
	if !old.exited() {
		kill(old)
	}
	e := c.engines[i]
	p, err := startProc(c.bin, c.logDir, "agent-"+e.ID, agentArgs(&c.opts, e, c.natsFor(i)))
	if err != nil {
		return err
	}
	c.replace(old, p)
	c.mu.Lock()
	c.agentProcs[i] = p
	c.engines[i].AgentPID = p.PID()
	c.mu.Unlock()
	return nil
}

// KillRouter ends router r with SIGKILL and forgets it.
func (c *Cluster) KillRouter(r Router) {
	c.mu.Lock()
	for i := range c.routers {
		if c.routers[i].proc == r.proc {
			c.routers = append(c.routers[:i], c.routers[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	kill(r.proc)
}

// RestartRouter starts a router on r's address with r's flags (r stopped
// or killed before) and waits until it sees every worker ready.
func (c *Cluster) RestartRouter(ctx context.Context, r Router) (Router, error) {
	nr, err := c.spawnRouter(portOfURL(r.URL), r.Flags)
	if err != nil {
		return Router{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	if err := c.waitRouter(ctx, nr, false); err != nil {
		return nr, err
	}
	return nr, nil
}

// NATSServers is the number of embedded NATS servers.
func (c *Cluster) NATSServers() int {
	if c.nats == nil {
		return 1
	}
	return c.nats.Servers()
}

// NATSRunning reports whether NATS server i runs.
func (c *Cluster) NATSRunning(i int) bool {
	if c.nats == nil {
		return i == 0
	}
	return c.nats.Running(i)
}

// StopNATS stops NATS server i of a cluster of them; its clients fail
// over to the others.
func (c *Cluster) StopNATS(i int) error {
	if c.nats == nil || i < 0 || i >= c.nats.Servers() {
		return fmt.Errorf("%w: NATS server %d (a cluster has NATSServers > 1)", ErrNoSuch, i)
	}
	c.nats.Stop(i)
	return nil
}

// StartNATS starts NATS server i again, on its ports and store, and waits
// until it is current with the JetStream meta group.
func (c *Cluster) StartNATS(i int) error {
	if c.nats == nil || i < 0 || i >= c.nats.Servers() {
		return fmt.Errorf("%w: NATS server %d (a cluster has NATSServers > 1)", ErrNoSuch, i)
	}
	if err := c.nats.Start(i); err != nil {
		return err
	}
	return c.nats.WaitReady(30 * time.Second)
}

// portOfURL is the port of an http://host:port URL.
func portOfURL(url string) int {
	n := 0
	for _, ch := range portOf(url) {
		n = n*10 + int(ch-'0')
	}
	return n
}
