// This file holds the allocation of a run of free loopback ports below the ephemeral range.

package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are taken below the kernel's ephemeral range: a port in it may be
// handed to any outgoing connection (ours included) between the check and
// the child's bind, while ports below it are only taken by explicit binds.
const (
	lowestPort         = 15000
	defaultEphemeral   = 32768
	ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	allocAttempts      = 200
)

// ErrNoPorts means no run of free loopback ports could be found.
var ErrNoPorts = errors.New("cluster: no free loopback port range")

// portRange is a run of consecutive loopback ports [Base, Base+N).
type portRange struct {
	Base, N int
}

// take hands out the next n ports of the range.
type portCursor struct {
	next, end int
}

func (r portRange) cursor() *portCursor { return &portCursor{next: r.Base, end: r.Base + r.N} }

func (c *portCursor) take(n int) int {
	p := c.next
	c.next += n
	if c.next > c.end {
		panic(fmt.Sprintf("cluster: port plan overran its range by %d", c.next-c.end))
	}
	return p
}

// allocPorts finds n consecutive ports on 127.0.0.1 that are free now,
// trying random bases in [lowestPort, ephemeral start). Each port is
// verified by binding it; the listeners are closed before returning, so a
// child can bind the port next.
func allocPorts(n int) (portRange, error) {
	if n <= 0 {
		return portRange{}, fmt.Errorf("%w: asked for %d ports", ErrNoPorts, n)
	}
	hi := ephemeralStart()
	if hi-lowestPort < n {
		return portRange{}, fmt.Errorf("%w: %d ports do not fit below the ephemeral range (starts at %d)", ErrNoPorts, n, hi)
	}
	for range allocAttempts {
		base := lowestPort + rand.IntN(hi-lowestPort-n+1)
		if rangeFree(base, n) {
			return portRange{Base: base, N: n}, nil
		}
	}
	return portRange{}, fmt.Errorf("%w: %d consecutive ports in %d..%d after %d tries", ErrNoPorts, n, lowestPort, hi-1, allocAttempts)
}

// rangeFree binds every port of [base, base+n) on loopback at once. A port
// bound by anyone on 127.0.0.1 or on the wildcard address fails the bind.
func rangeFree(base, n int) bool {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp4", net.JoinHostPort(loopback, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}

// ephemeralStart is the first port of the kernel's ephemeral range, or the
// Linux default where the kernel does not say.
func ephemeralStart() int {
	b, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return defaultEphemeral
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return defaultEphemeral
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= lowestPort {
		return defaultEphemeral
	}
	return lo
}
