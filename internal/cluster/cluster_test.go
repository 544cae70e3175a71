package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kvrouter/internal/cluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// testCtx bounds a test against hangs; it is not a timing assertion.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRangeFree(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	if rangeFree(taken-1, 3) {
		t.Fatalf("range around port %d reported free while it is bound", taken)
	}
	r, err := allocPorts(40)
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 40 || r.Base < lowestPort || r.Base+r.N > ephemeralStart() {
		t.Fatalf("range %+v outside [%d, %d)", r, lowestPort, ephemeralStart())
	}
	if !rangeFree(r.Base, r.N) {
		t.Fatalf("allocated range %+v is not free", r)
	}
}

func TestPortCursorOverrun(t *testing.T) {
	c := portRange{Base: 20000, N: 3}.cursor()
	if got := c.take(2); got != 20000 {
		t.Fatalf("first take = %d", got)
	}
	if got := c.take(1); got != 20002 {
		t.Fatalf("second take = %d", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("taking past the range did not panic")
		}
	}()
	c.take(1)
}

// TestStartStop runs two DP2/TP2 engines and two routers, checks that every
// bound port is distinct and served by the cluster, and that Stop leaves no
// process and no bound port behind.
func TestStartStop(t *testing.T) {
	bin := clustertest.Binary(t)
	c, err := Start(testCtx(t), Options{Binary: bin, Engines: 2, DP: 2, TP: 2, BlockSize: 16,
		RouterFlags: [][]string{nil, {"--hint-policy", "min-blocks"}}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop()
		}
	})
	var endpoints []string
	for _, e := range c.Engines() {
		if len(e.Control) != 4 || len(e.Events) != 2 || len(e.Replay) != 2 || len(e.Snapshot) != 2 {
			t.Fatalf("engine %s: %d control, %d events, %d replay, %d snapshot endpoints", e.ID, len(e.Control), len(e.Events), len(e.Replay), len(e.Snapshot))
		}
		if e.ControlEndpoint(1) != e.Control[2] {
			t.Fatalf("engine %s: DP rank 1's hint endpoint %s, want TP rank 0's %s", e.ID, e.ControlEndpoint(1), e.Control[2])
		}
		endpoints = append(endpoints, e.URL)
		endpoints = append(endpoints, e.Control...)
		endpoints = append(endpoints, e.Events...)
		endpoints = append(endpoints, e.Replay...)
		endpoints = append(endpoints, e.Snapshot...)
	}
	for _, r := range c.Routers() {
		endpoints = append(endpoints, r.URL, r.Admin)
	}
	if len(c.Routers()) != 2 || c.RouterURL() != c.Routers()[0].URL {
		t.Fatalf("routers %+v, RouterURL %s", c.Routers(), c.RouterURL())
	}
	ports := map[int]string{}
	for _, ep := range endpoints {
		host, p, err := net.SplitHostPort(ep[strings.Index(ep, "//")+2:])
		if err != nil || host != loopback {
			t.Fatalf("endpoint %s is not on %s (%v)", ep, loopback, err)
		}
		port, _ := strconv.Atoi(p)
		if prev, dup := ports[port]; dup {
			t.Fatalf("port %d used by %s and %s", port, prev, ep)
		}
		ports[port] = ep
		if rangeFree(port, 1) {
			t.Errorf("nothing listens on %s", ep)
		}
	}
	if want := 2*(1+4+2+2+2) + 2*2; len(ports) != want {
		t.Fatalf("%d ports, want %d", len(ports), want)
	}
	pids := c.PIDs()
	if len(pids) != 2+2+2 {
		t.Fatalf("%d processes, want 6", len(pids))
	}
	logDir := c.LogDir()

	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill 0: %v)", pid, err)
		}
	}
	for port, ep := range ports {
		if !rangeFree(port, 1) {
			t.Errorf("%s still bound after Stop", ep)
		}
	}
	if _, err := os.Stat(logDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary log dir %s left after a clean stop (%v)", logDir, err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestAddRouter: a router added later learns the workers, ready, from the
// agents alone, and StopRouter ends only it.
func TestAddRouter(t *testing.T) {
	bin := clustertest.Binary(t)
	c, err := Start(testCtx(t), Options{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	r, err := c.AddRouter(testCtx(t), []string{"--hint-policy", "min-blocks"})
	if err != nil {
		t.Fatal(err)
	}
	if rs := c.Routers(); len(rs) != 2 || rs[1].URL != r.URL || c.RouterURL() == r.URL {
		t.Fatalf("routers %+v after adding %s", rs, r.URL)
	}
	if err := c.StopRouter(r); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(r.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("stopped router %d still exists (kill 0: %v)", r.PID, err)
	}
	if rs := c.Routers(); len(rs) != 1 || !healthy(testCtx(t), rs[0].URL+"/healthz") {
		t.Fatalf("routers %+v after stopping the added one", rs)
	}
}

// TestStartRetriesLostPort: a port taken between the check and the child's
// bind fails that attempt, and Start tries again on other ports.
func TestStartRetriesLostPort(t *testing.T) {
	bin := clustertest.Binary(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	allocate = func(n int) (portRange, error) {
		calls++
		if calls == 1 {
			return portRange{Base: taken, N: n}, nil // engine A's HTTP port
		}
		return allocPorts(n)
	}
	defer func() { allocate = allocPorts }()
	dir := t.TempDir()
	c, err := Start(testCtx(t), Options{Binary: bin, LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if calls != 2 {
		t.Fatalf("%d port allocations, want 2", calls)
	}
	b, err := os.ReadFile(filepath.Join(dir, "engine-A.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "address already in use") {
		t.Fatalf("engine A's log does not show the lost port:\n%s", b)
	}
	if strings.Contains(c.Engines()[0].URL, ":"+strconv.Itoa(taken)) {
		t.Fatalf("engine A on the taken port %d: %s", taken, c.Engines()[0].URL)
	}
}

// TestStartFailure: an engine that cannot start fails Start with its log,
// and nothing is left running.
func TestStartFailure(t *testing.T) {
	bin := clustertest.Binary(t)
	dir := t.TempDir()
	_, err := Start(testCtx(t), Options{Binary: bin, Engines: 2, LogDir: dir,
		EngineFlags: []string{"--max-model-len", "-5"}})
	if err == nil {
		t.Fatal("Start succeeded with a broken engine flag")
	}
	if !strings.Contains(err.Error(), "max-model-len") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error does not quote the engine's log or name the log dir: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 5 { // two engines, two agents, a router
		t.Fatalf("logs %v, want the two engines', agents' and the router's", logs)
	}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		// The first line records the command; the pid is not logged, so
		// check the command is gone instead.
		line := strings.SplitN(string(b), "\n", 2)[0]
		if stillRunning(t, strings.TrimPrefix(line, "# ")) {
			t.Errorf("%s still running after a failed Start", line)
		}
	}
}

// stillRunning looks for a live process with exactly this command line.
func stillRunning(t *testing.T, cmdline string) bool {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc to list processes")
	}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == cmdline {
			return true
		}
	}
	return false
}
