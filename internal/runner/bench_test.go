package runner

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
)

const benchSlots = 4096

// BenchmarkPoolDeposit stores into a full pool: every store evicts.
func BenchmarkPoolDeposit(b *testing.B) {
	for _, pol := range policies {
		b.Run(pol.name, func(b *testing.B) {
			p := newTestPool(b, pol.mk, benchSlots, 0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				res, err := p.Reserve(uint64(i))
				if err != nil {
					b.Fatal(err)
				}
				p.Commit(res.Slot, 0, false, false)
			}
		})
	}
}

// BenchmarkPoolQuery looks up held and absent keys alternately.
func BenchmarkPoolQuery(b *testing.B) {
	p := newTestPool(b, NewLRU, benchSlots, 0)
	for k := uint64(0); k < benchSlots; k++ {
		store(b, p, k, false)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Lookup(uint64(i % (2 * benchSlots)))
	}
}

// BenchmarkPoolEvict removes a held block and stores it back.
func BenchmarkPoolEvict(b *testing.B) {
	p := newTestPool(b, NewLRU, benchSlots, 0)
	for k := uint64(0); k < benchSlots; k++ {
		store(b, p, k, false)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := uint64(i % benchSlots)
		p.Remove(k)
		res, _ := p.Reserve(k)
		p.Commit(res.Slot, 0, false, false)
	}
}

// BenchmarkRunnerQuery is the engine's per-request lookup of a 64-block
// prefix through the locked service.
func BenchmarkRunnerQuery(b *testing.B) {
	r := newTestRunner(b, Config{Capacity: benchSlots})
	keys := make([]uint64, 64)
	for i := range keys {
		keys[i] = uint64(i)
		r.Deposit(keys[i], block(keys[i]), DepositOptions{})
	}
	dst := make([]Status, 0, len(keys))
	b.ReportAllocs()
	for b.Loop() {
		dst = r.AppendQuery(dst[:0], keys, "req")
	}
}

// BenchmarkFetchLoopback pulls blocks between two runners in this process
// over loopback TCP; bytes/s is the pull bandwidth.
func BenchmarkFetchLoopback(b *testing.B) {
	for _, size := range []int{256 << 10, 2 << 20} {
		b.Run(fmt.Sprintf("block=%dKiB", size>>10), func(b *testing.B) {
			const n = 32
			keys := make([]uint64, n)
			src := newTestRunner(b, Config{BlockBytes: size, Capacity: n})
			buf := make([]byte, size)
			for i := range keys {
				keys[i] = uint64(i + 1)
				buf[0] = byte(i)
				src.Deposit(keys[i], buf, DepositOptions{})
			}
			ep := serve(b, src, TCPConfig{BlockBytes: size}).endpoint
			tr, _ := NewTCPTransport(TCPConfig{BlockBytes: size})
			b.Cleanup(func() { tr.Close() })
			dst := newTestRunner(b, Config{BlockBytes: size, Capacity: n, Transport: tr, Logger: slog.New(slog.DiscardHandler)})
			b.SetBytes(int64(n * size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req := strconv.Itoa(i)
				dst.SubmitHint(req, Hint{Source: ep, Keys: keys})
				res, err := dst.Fetch(context.Background(), req, keys)
				if err != nil || len(res.Local) != n {
					b.Fatalf("fetch: %d local, %v", len(res.Local), err)
				}
				dst.DiscardHint(req)
				dst.EvictAll()
			}
		})
	}
}
