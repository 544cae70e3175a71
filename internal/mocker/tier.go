// This file holds the tier below the GPU pool: a runner shard per TP rank, and peer pulls.

package mocker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"

	"kvrouter/internal/runner"
)

// shards is one DP rank's KV cache runner: a runner per TP rank, each
// holding its 1/TP slice of every block and serving peers on its own control
// port. A block is usable only while every shard holds its slice.
type shards struct {
	runners    []*runner.Runner
	servers    []*runner.Server
	transports []*runner.TCPTransport
	shardBytes int
}

var _ Lower = (*shards)(nil)

// Holds implements Lower.
func (s *shards) Holds(key uint64) bool {
	k := []uint64{key}
	for _, r := range s.runners {
		if r.Query(k, "")[0].State != runner.Hit {
			return false
		}
	}
	return true
}

// Load implements Lower.
func (s *shards) Load(key uint64, dst []byte) bool {
	for t, r := range s.runners {
		c, err := r.Read(key)
		if err != nil {
			return false
		}
		copy(dst[t*s.shardBytes:(t+1)*s.shardBytes], c.Bytes())
		c.Release()
	}
	return true
}

// Store implements Lower. A shard that cannot take the block (every slot
// pinned, or the key being written by a fetch) just lacks it: the block is
// then not restorable, which the engines treat as a miss.
func (s *shards) Store(key uint64, block []byte) {
	for t, r := range s.runners {
		_, _ = r.Deposit(key, block[t*s.shardBytes:(t+1)*s.shardBytes], runner.DepositOptions{})
	}
}

// claim pins key on every shard; false, with nothing pinned, when a shard
// lacks it.
func (s *shards) claim(key uint64) ([]*runner.Claim, bool) {
	cs := make([]*runner.Claim, 0, len(s.runners))
	for _, r := range s.runners {
		c, err := r.Read(key)
		if err != nil {
			for _, c := range cs {
				c.Release()
			}
			return nil, false
		}
		cs = append(cs, c)
	}
	return cs, true
}

// evict removes keys from every shard (all blocks when keys is nil) and
// returns the most any shard removed.
func (s *shards) evict(keys []uint64) int {
	most := 0
	for _, r := range s.runners {
		var n int
		if keys == nil {
			n = r.EvictAll()
		} else {
			n = r.Evict(keys...)
		}
		most = max(most, n)
	}
	return most
}

// pull is the outcome of fetching a request's hinted blocks.
type pull struct {
	keys   []uint64        // pulled and held on every shard, a prefix of the wanted keys
	claims []*runner.Claim // pin keys on every shard until the GPU restores them
	err    error           // why the rest is missing
}

func (p *pull) release() {
	for _, c := range p.claims {
		c.Release()
	}
	p.claims = nil
}

// fetch pulls want from the peer rank whose first shard serves source: TP
// rank t pulls its slice from the peer's shard t at source's port + t,
// following the attention-rank port rule both engines' runners bind by.
// All shards pull at once; a key counts only once every shard holds it, and
// only the leading run of such keys is kept, as a hole would make the
// blocks after it unusable.
func (s *shards) fetch(ctx context.Context, requestID, source string, want []uint64) pull {
	var res pull
	results := make([]runner.FetchResult, len(s.runners))
	errs := make([]error, len(s.runners))
	var wg sync.WaitGroup
	for t, r := range s.runners {
		ep, err := shardEndpoint(source, t)
		if err == nil {
			err = r.SubmitHint(requestID, runner.Hint{Source: ep, Keys: want})
		}
		if err != nil {
			errs[t] = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[t], errs[t] = r.Fetch(ctx, requestID, want)
		}()
	}
	wg.Wait()
	for _, r := range s.runners {
		r.DiscardHint(requestID)
	}
	res.err = errors.Join(errs...)
	local := make([]map[uint64]bool, len(s.runners))
	for t := range s.runners {
		local[t] = make(map[uint64]bool, len(results[t].Local))
		for _, k := range results[t].Local {
			local[t][k] = true
		}
	}
keys:
	for _, k := range want {
		for t := range s.runners {
			if !local[t][k] {
				break keys
			}
		}
		var cs []*runner.Claim
		for _, r := range s.runners {
			c, err := r.Read(k)
			if err != nil {
				for _, c := range cs {
					c.Release()
				}
				break keys
			}
			cs = append(cs, c)
		}
		res.claims = append(res.claims, cs...)
		res.keys = append(res.keys, k)
	}
	return res
}

// shardEndpoint is TP rank t's endpoint of the runner whose rank 0 serves
// source.
func shardEndpoint(source string, t int) (string, error) {
	if t == 0 {
		return source, nil
	}
	u, err := url.Parse(source)
	if err != nil || u.Scheme != "tcp" {
		return "", fmt.Errorf("source endpoint %q: want tcp://host:port", source)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port+t > 65535 {
		return "", fmt.Errorf("source endpoint %q: no port for TP rank %d", source, t)
	}
	return "tcp://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(port+t)), nil
}

func (s *shards) close() {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	for _, r := range s.runners {
		_ = r.Close()
	}
	for _, tr := range s.transports {
		_ = tr.Close()
	}
}
