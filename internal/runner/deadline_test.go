package runner

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

func TestFetchTimeoutConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     TCPConfig
		want    time.Duration
		wantErr bool
	}{
		// 4 MiB at 1 Gbit/s is 33.554432 ms a block.
		{"derived, 4 MiB blocks", TCPConfig{BlockBytes: 4 << 20}, 5*time.Second + 4096*33554432*time.Nanosecond, false},
		{"derived, test blocks", TCPConfig{BlockBytes: testBlock}, 5*time.Second + 4096*512*time.Nanosecond, false},
		{"derived from the other limits", TCPConfig{BlockBytes: 1 << 20, MaxKeysPerFetch: 10, IOTimeout: time.Second}, time.Second + 10*8388608*time.Nanosecond, false},
		{"saturates", TCPConfig{BlockBytes: 1 << 30, MaxKeysPerFetch: 1 << 40}, math.MaxInt64, false},
		{"explicit", TCPConfig{BlockBytes: testBlock, FetchTimeout: 3 * time.Second}, 3 * time.Second, false},
		{"negative", TCPConfig{BlockBytes: testBlock, FetchTimeout: -time.Second}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.withDefaults()
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "FetchTimeout") {
					t.Fatalf("withDefaults() error = %v, want ErrConfig naming FetchTimeout", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.FetchTimeout != tt.want {
				t.Fatalf("FetchTimeout = %v, want %v", got.FetchTimeout, tt.want)
			}
		})
	}
}

// rawFetch handshakes with a Server as a bare client (no secret) whose
// receive buffer is small, sends one FETCH for keys and reads no answer.
func rawFetch(t *testing.T, endpoint string, keys []uint64) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(endpoint, endpointTCP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := c.(*net.TCPConn)
	// Small, so the server's sends block long before the answer is through.
	tc.SetReadBuffer(16 << 10)
	var nonce [nonceLen]byte
	if _, err := c.Write(append(appendHeader(nil, msgHello, nonceLen), nonce[:]...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, headerLen+challengeLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read challenge: %v", err)
	}
	if _, err := c.Write(appendHeader(nil, msgAuth, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf[:headerLen]); err != nil || buf[3] != msgReady {
		t.Fatalf("read READY: type %d, %v", buf[3], err)
	}
	if _, err := c.Write(appendFetch(nil, keys)); err != nil {
		t.Fatal(err)
	}
	return tc
}

// TestServerFetchDeadline: a peer that stops reading, or reads just fast
// enough that no single block's send outlives IOTimeout, is cut off at
// FetchTimeout; one that stalls mid-block is cut off at IOTimeout. Either
// way its connection fails before the answer is complete, the block being
// sent is unpinned (the pool can free every slot again) and the expiry is
// counted. The other bound is a minute, so without the one under test the
// server would hold its pin well past waitFor's bound.
func TestServerFetchDeadline(t *testing.T) {
	const (
		blockBytes = 256 << 10
		nKeys      = 8
		chunk      = 16 << 10
	)
	// Every key's BLOCK frame, then END: what a complete answer takes.
	const complete = nKeys*(headerLen+blockHeadLen+blockBytes) + headerLen
	tests := []struct {
		name string
		// read drains c as the peer does; nil reads nothing until the
		// server has given up.
		read func(c net.Conn) int64
		// ioTimeout bounds one block's send; 0 is a minute, so that the
		// 200 ms fetch deadline is what cuts the fetch off.
		ioTimeout time.Duration
	}{
		{"stops reading", nil, 0},
		// The first block fills the small socket buffers and the send
		// blocks mid-block: IOTimeout cuts it off long before the fetch
		// deadline, and that is an expiry too.
		{"stalls mid-block", nil, 100 * time.Millisecond},
		{"reads slowly", func(c net.Conn) int64 {
			// 16 KiB every 10 ms: the 2 MiB answer takes at least 1.28 s
			// of sleeps alone, many times the 200 ms deadline, yet every
			// block is through in well under IOTimeout. It stops at a
			// complete answer, as the server then waits for a next FETCH.
			var n int64
			buf := make([]byte, chunk)
			for n < complete {
				m, err := io.ReadFull(c, buf[:min(chunk, complete-n)])
				n += int64(m)
				if err != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			return n
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRunner(t, Config{BlockBytes: blockBytes, Capacity: nKeys})
			keys := make([]uint64, nKeys)
			for i := range keys {
				keys[i] = uint64(i + 1)
				if _, err := r.Deposit(keys[i], make([]byte, blockBytes), DepositOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			fetchTimeout, ioTimeout := 200*time.Millisecond, time.Minute
			if tt.ioTimeout > 0 {
				fetchTimeout, ioTimeout = time.Minute, tt.ioTimeout
			}
			src := serve(t, r, TCPConfig{
				BlockBytes:   blockBytes,
				SocketBuffer: 16 << 10,
				IOTimeout:    ioTimeout,
				FetchTimeout: fetchTimeout,
				Logger:       slog.New(slog.DiscardHandler), // the expiry's warning is expected
			})
			c := rawFetch(t, src.endpoint, keys)

			var got int64
			if tt.read != nil {
				got = tt.read(c)
			}
			waitFor(t, "the server to cut the fetch off, unpin and drop the connection", func() bool {
				src.srv.mu.Lock()
				conns := len(src.srv.conns)
				src.srv.mu.Unlock()
				st := r.Stats()
				return st.ServeExpired == 1 && st.Pinned == 0 && conns == 0
			})
			if tt.read == nil {
				n, _ := io.Copy(io.Discard, c)
				got += n
			}
			if got >= complete {
				t.Fatalf("peer read %d bytes, the whole %d-byte answer: the fetch was not cut off", got, complete)
			}
			// Nothing holds a slot: every block can be evicted and its
			// slot is free again.
			r.EvictAll()
			if st := r.Stats(); st.Pinned != 0 || st.Free != st.Slots {
				t.Fatalf("after the deadline: %+v, want no pins and every slot free", st)
			}
		})
	}
}
