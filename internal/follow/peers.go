// This file holds the check of the runner endpoints a registration names: the worker's own host, or --peer-allow.

package follow

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// PeerAllow is --peer-allow: the networks whose runner endpoints any
// registration may name. Without it, a registration may only name
// endpoints on its worker's own host: whoever can publish in discovery
// could otherwise point engines' pulls at any host and port.
type PeerAllow []netip.Prefix

// ParsePeerAllow reads --peer-allow values: CIDRs or single addresses.
func ParsePeerAllow(vals []string) (PeerAllow, error) {
	var out PeerAllow
	for _, v := range vals {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("--peer-allow %q: want a CIDR such as 10.0.0.0/8 or an address", s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out, nil
}

// check reports the first endpoint of eps (rank → tcp://host:port) that is
// neither on the host of workerURL nor within the allowed networks.
func (a PeerAllow) check(workerURL string, eps map[int]string) error {
	u, err := url.Parse(workerURL)
	if err != nil {
		return fmt.Errorf("worker url %q: %v", workerURL, err)
	}
	own := u.Hostname()
	for _, rank := range sortedRanks(eps) {
		ep := eps[rank]
		host, ok := endpointHost(ep)
		switch {
		case !ok:
			return fmt.Errorf("runner endpoint %q of rank %d: want tcp://HOST:PORT", ep, rank)
		case sameHost(host, own) || a.allows(host):
		default:
			return fmt.Errorf("runner endpoint %s of rank %d: %s is neither the worker's host (%s) nor within --peer-allow",
				ep, rank, host, own)
		}
	}
	return nil
}

func sortedRanks(eps map[int]string) []int {
	out := make([]int, 0, len(eps))
	for r := range eps {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// endpointHost is the host of tcp://HOST:PORT, unbracketed.
func endpointHost(ep string) (string, bool) {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return "", false
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" {
		return "", false
	}
	return host, true
}

// sameHost compares hosts as written: names without case, addresses as
// addresses; loopback names one host.
func sameHost(a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	x, errA := netip.ParseAddr(a)
	y, errB := netip.ParseAddr(b)
	if errA == nil && errB == nil && x.Unmap() == y.Unmap() {
		return true
	}
	return loopback(a) && loopback(b)
}

func loopback(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// allows reports whether host is an address within the allowed networks;
// names are not resolved, so a name must be the worker's own.
func (a PeerAllow) allows(host string) bool {
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range a {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
