package runner

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// startScripted runs a hand-written peer on loopback. With handshake set it
// plays a correct server up to the first FETCH and hands its keys to script;
// otherwise script gets the raw connection at once. It returns the peer's
// endpoint.
func startScripted(t *testing.T, handshake bool, script func(c net.Conn, keys []uint64)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				var keys []uint64
				if handshake {
					if keys, err = acceptFetch(c); err != nil {
						return
					}
				}
				script(c, keys)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "tcp://" + ln.Addr().String()
}

// acceptFetch plays the server's side of the handshake (no secret) and
// reads one FETCH.
func acceptFetch(c net.Conn) ([]uint64, error) {
	buf := make([]byte, headerLen+nonceLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	if _, err := c.Write(appendChallenge(nil, challenge{blockBytes: testBlock, maxKeys: 64})); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c, buf[:headerLen]); err != nil {
		return nil, err
	}
	if _, err := c.Write(appendHeader(nil, msgReady, 0)); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c, buf[:headerLen]); err != nil {
		return nil, err
	}
	p := make([]byte, binary.BigEndian.Uint32(buf[4:8]))
	if _, err := io.ReadFull(c, p); err != nil {
		return nil, err
	}
	return parseFetch(p, nil)
}

func goodBlock(key uint64) []byte {
	b := block(key)
	return append(appendBlockHead(nil, key, xxh3.Hash(b), testBlock), b...)
}

// stall holds the connection without answering until the client closes it.
func stall(c net.Conn, _ []uint64) { io.Copy(io.Discard, c) }

func TestBadPeers(t *testing.T) {
	baseline := runtime.NumGoroutine()
	tests := []struct {
		name      string
		handshake bool
		script    func(c net.Conn, keys []uint64)
		wantErr   error
		wantLocal []uint64
	}{
		{
			name:    "garbage instead of a challenge",
			script:  func(c net.Conn, _ []uint64) { c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")) },
			wantErr: ErrProtocol,
		},
		{
			name:    "stalls in the handshake",
			script:  stall,
			wantErr: context.DeadlineExceeded,
		},
		{
			name:      "garbage instead of answers",
			handshake: true,
			script:    func(c net.Conn, _ []uint64) { c.Write([]byte("\x00\x01garbage garbage garbage")) },
			wantErr:   ErrProtocol,
		},
		{
			name:      "stalls after the request",
			handshake: true,
			script:    stall,
			wantErr:   context.DeadlineExceeded,
		},
		{
			name:      "stalls mid-block, then sends the rest too late",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				b := goodBlock(keys[0])
				c.Write(b[:len(b)/2])
				io.Copy(io.Discard, c) // returns when the client gives up
				c.Write(b[len(b)/2:])
			},
			wantErr: context.DeadlineExceeded,
		},
		{
			name:      "closes mid-block",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				c.Write(goodBlock(keys[0]))
				c.Write(goodBlock(keys[1])[:headerLen+blockHeadLen+testBlock/2])
			},
			wantErr:   io.ErrUnexpectedEOF,
			wantLocal: []uint64{1},
		},
		{
			name:      "bad checksum",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				bad := goodBlock(keys[0])
				bad[len(bad)-1] ^= 1
				c.Write(bad)
				c.Write(goodBlock(keys[1]))
				c.Write(appendHeader(nil, msgEnd, 0))
			},
			wantErr:   ErrChecksum,
			wantLocal: []uint64{2},
		},
		{
			name:      "answers a key it was not asked",
			handshake: true,
			script:    func(c net.Conn, _ []uint64) { c.Write(goodBlock(99)) },
			wantErr:   ErrProtocol,
		},
		{
			name:      "answers out of order",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				c.Write(goodBlock(keys[1]))
				c.Write(goodBlock(keys[0]))
			},
			wantErr: ErrProtocol,
		},
		{
			name:      "missing for a key it was not asked",
			handshake: true,
			script:    func(c net.Conn, _ []uint64) { c.Write(appendMissing(nil, 99)) },
			wantErr:   ErrProtocol,
		},
		{
			name:      "oversized block frame",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				c.Write(appendHeader(nil, msgBlock, 1<<30))
				c.Write(make([]byte, 4096))
			},
			wantErr: ErrFrameTooLarge,
		},
		{
			name:      "undersized block frame",
			handshake: true,
			script:    func(c net.Conn, keys []uint64) { c.Write(appendHeader(nil, msgBlock, blockHeadLen)) },
			wantErr:   ErrProtocol,
		},
		{
			name:      "oversized error frame",
			handshake: true,
			script:    func(c net.Conn, _ []uint64) { c.Write(appendHeader(nil, msgError, 1<<20)) },
			wantErr:   ErrFrameTooLarge,
		},
		{
			name:      "peer error",
			handshake: true,
			script:    func(c net.Conn, _ []uint64) { c.Write(appendError(nil, codeProtocol, "no\nthanks")) },
			wantErr:   ErrProtocol,
		},
		{
			name:      "extra answer instead of END",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				c.Write(goodBlock(keys[0]))
				c.Write(appendMissing(nil, keys[1]))
				c.Write(goodBlock(keys[1]))
			},
			wantErr:   ErrProtocol,
			wantLocal: []uint64{1},
		},
		{
			name:      "unknown message type",
			handshake: true,
			script:    func(c net.Conn, _ []uint64) { c.Write(appendHeader(nil, 200, 0)) },
			wantErr:   ErrProtocol,
		},
		{
			name:      "wrong version",
			handshake: true,
			script: func(c net.Conn, keys []uint64) {
				b := goodBlock(keys[0])
				b[2] = wireVersion + 1
				c.Write(b)
			},
			wantErr: ErrProtocol,
		},
		{
			name: "challenge with another block size",
			script: func(c net.Conn, _ []uint64) {
				io.ReadFull(c, make([]byte, headerLen+nonceLen))
				c.Write(appendChallenge(nil, challenge{blockBytes: testBlock * 2, maxKeys: 1}))
				io.Copy(io.Discard, c)
			},
			wantErr: ErrBlockSize,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := startScripted(t, tt.handshake, tt.script)
			dst := newDest(t, Config{Capacity: 4, OperationTimeout: 300 * time.Millisecond}, TCPConfig{})
			keys := []uint64{1, 2}
			dst.SubmitHint("r", Hint{Source: ep, Keys: keys})
			res, err := dst.Fetch(context.Background(), "r", keys)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("fetch error %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(res.Local, tt.wantLocal) {
				t.Fatalf("local %v, want %v", res.Local, tt.wantLocal)
			}
			var absent []uint64
			for _, k := range keys {
				if !slices.Contains(tt.wantLocal, k) {
					absent = append(absent, k)
				}
			}
			if !slices.Equal(res.Missing, absent) {
				t.Fatalf("missing %v, want %v", res.Missing, absent)
			}
			// Close waits for the transfer goroutine: only then is the
			// pool's state final.
			dst.Close()
			checkLocal(t, dst, tt.wantLocal, absent)
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error carries raw peer text: %q", err)
			}
		})
	}
	waitGoroutines(t, baseline)
}

// waitFor polls cond until it holds. The bound only turns a hang into a
// failure; nothing here measures time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// waitGoroutines waits for goroutines to settle back to baseline.
func waitGoroutines(t *testing.T, baseline int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if runtime.NumGoroutine() <= baseline {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines leaked: %d, baseline %d\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
}

// TestConcurrentFetchSharesTransfer: while one request's transfer of a key
// runs, queries say FETCHING and another request's Fetch waits for it
// rather than asking the peer again.
func TestConcurrentFetchSharesTransfer(t *testing.T) {
	gate := make(chan struct{})
	var asked atomic.Int32 // times the peer was asked for key 1
	ep := startScripted(t, true, func(c net.Conn, keys []uint64) {
		for _, k := range keys {
			if k == 1 {
				asked.Add(1)
			}
		}
		<-gate
		for _, k := range keys {
			c.Write(goodBlock(k))
		}
		c.Write(appendHeader(nil, msgEnd, 0))
		io.Copy(io.Discard, c)
	})
	dst := newDest(t, Config{Capacity: 4, OperationTimeout: 10 * time.Second, AbandonTimeout: 10 * time.Second}, TCPConfig{})
	for _, req := range []string{"a", "b"} {
		dst.SubmitHint(req, Hint{Source: ep, Keys: []uint64{1}})
	}
	type result struct {
		res FetchResult
		err error
	}
	first := make(chan result)
	go func() {
		res, err := dst.Fetch(context.Background(), "a", []uint64{1})
		first <- result{res, err}
	}()
	waitFor(t, "the transfer to start", func() bool { return dst.Query([]uint64{1}, "b")[0].State == Fetching })
	second := make(chan result)
	go func() {
		res, err := dst.Fetch(context.Background(), "b", []uint64{1})
		second <- result{res, err}
	}()
	close(gate)
	for _, ch := range []chan result{first, second} {
		r := <-ch
		if r.err != nil || !slices.Equal(r.res.Local, []uint64{1}) {
			t.Fatalf("fetch: %+v %v", r.res, r.err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("peer asked %d times for key 1", n)
	}
	checkLocal(t, dst, []uint64{1}, nil)
}
