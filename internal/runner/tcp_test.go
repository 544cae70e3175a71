package runner

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts accepted connections, to observe reuse.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

type source struct {
	r        *Runner
	srv      *Server
	endpoint string
	accepts  *countingListener
}

// startSource runs a runner holding keys behind a Server on loopback.
func startSource(t testing.TB, capacity int, tcp TCPConfig, keys ...uint64) *source {
	t.Helper()
	r := newTestRunner(t, Config{Capacity: capacity})
	for _, k := range keys {
		if _, err := r.Deposit(k, block(k), DepositOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return serve(t, r, tcp)
}

// serve runs a Server for r on a loopback port.
func serve(t testing.TB, r *Runner, tcp TCPConfig) *source {
	t.Helper()
	if tcp.BlockBytes == 0 {
		tcp.BlockBytes = testBlock
	}
	srv, err := NewServer(r, tcp)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(cl) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &source{r: r, srv: srv, endpoint: "tcp://" + ln.Addr().String(), accepts: cl}
}

// newDest builds a runner pulling over a TCPTransport.
func newDest(t testing.TB, cfg Config, tcp TCPConfig) *Runner {
	t.Helper()
	if tcp.BlockBytes == 0 {
		tcp.BlockBytes = testBlock
	}
	tr, err := NewTCPTransport(tcp)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Transport = tr
	r := newTestRunner(t, cfg)
	t.Cleanup(func() { tr.Close() })
	return r
}

// checkLocal verifies that exactly want are readable with the right bytes
// and that no slot is left pinned.
func checkLocal(t *testing.T, r *Runner, want []uint64, absent []uint64) {
	t.Helper()
	for _, k := range want {
		c, err := r.Read(k)
		if err != nil {
			t.Fatalf("key %d not local: %v", k, err)
		}
		if !bytes.Equal(c.Bytes(), block(k)) {
			t.Fatalf("key %d: corrupt block", k)
		}
		c.Release()
	}
	for _, k := range absent {
		if _, err := r.Read(k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("key %d should be absent: %v", k, err)
		}
	}
	st := r.Stats()
	if st.Pinned != 0 || st.Pending != 0 || st.Free+st.Used != st.Slots || st.Transfers != 0 {
		t.Fatalf("slots leaked: %+v", st)
	}
}

func TestFetch(t *testing.T) {
	src := startSource(t, 16, TCPConfig{MaxKeysPerFetch: 3}, 1, 2, 3, 5, 6, 7, 8, 9)
	rec := &recorder{}
	dst := newDest(t, Config{Capacity: 16, Sink: rec}, TCPConfig{})
	ctx := context.Background()

	if err := dst.SubmitHint("r1", Hint{Source: src.endpoint, Keys: []uint64{1, 2, 3, 4}}); err != nil {
		t.Fatal(err)
	}
	res, err := dst.Fetch(ctx, "r1", []uint64{1, 2, 3, 4, 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Local, []uint64{1, 2, 3}) || !slices.Equal(res.Missing, []uint64{4, 10}) {
		t.Fatalf("result %+v", res)
	}
	checkLocal(t, dst, []uint64{1, 2, 3}, []uint64{4, 10})
	if got := states(dst.Query([]uint64{1, 4, 10}, "r1")); !slices.Equal(got, []State{Hit, Miss, Miss}) {
		t.Fatalf("query after fetch = %v", got)
	}

	// The peer now holds 4, but this request gave up on it: not asked again.
	src.r.Deposit(4, block(4), DepositOptions{})
	res, err = dst.Fetch(ctx, "r1", []uint64{4})
	if err != nil || len(res.Missing) != 1 {
		t.Fatalf("refetch: %+v %v", res, err)
	}

	// Another request pulls more keys than one FETCH carries, on the same
	// connection.
	keys := []uint64{4, 5, 6, 7, 8, 9, 11}
	dst.SubmitHint("r2", Hint{Source: src.endpoint, Keys: keys})
	res, err = dst.Fetch(ctx, "r2", keys)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Local, keys[:6]) || !slices.Equal(res.Missing, []uint64{11}) {
		t.Fatalf("result %+v", res)
	}
	checkLocal(t, dst, keys[:6], nil)
	if n := src.accepts.n.Load(); n != 1 {
		t.Fatalf("%d connections accepted, want 1 reused", n)
	}
	var stored []uint64
	for _, ev := range rec.events() {
		if ev.Removed {
			t.Fatalf("unexpected removal %+v", ev)
		}
		stored = append(stored, ev.Keys...)
	}
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(stored, want) {
		t.Fatalf("stored events %v, want %v", stored, want)
	}
	if st := dst.Stats(); st.FetchedBlocks != 9 || st.Fetches != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Every FETCH ended well within its deadline.
	if st := src.r.Stats(); st.Pinned != 0 || st.ServeExpired != 0 {
		t.Fatalf("source left pins or cut a fetch off: %+v", st)
	}
}

func TestFetchWithoutHint(t *testing.T) {
	dst := newDest(t, Config{Capacity: 2}, TCPConfig{})
	dst.Deposit(1, block(1), DepositOptions{})
	res, err := dst.Fetch(context.Background(), "nobody", []uint64{1, 2})
	if !errors.Is(err, ErrNoHint) || !slices.Equal(res.Local, []uint64{1}) || !slices.Equal(res.Missing, []uint64{2}) {
		t.Fatalf("fetch without hint: %+v %v", res, err)
	}
	dst.SubmitHint("bad", Hint{Source: "http://x:1", Keys: []uint64{2}})
	res, err = dst.Fetch(context.Background(), "bad", []uint64{2})
	if !errors.Is(err, ErrHint) || len(res.Missing) != 1 {
		t.Fatalf("fetch from a non-tcp endpoint: %+v %v", res, err)
	}
}

func TestSecret(t *testing.T) {
	tests := []struct {
		name        string
		server, cli string
		wantErr     error
	}{
		{"shared", "s3cret", "s3cret", nil},
		{"none", "", "", nil},
		{"wrong", "s3cret", "other", ErrAuth},
		{"client lacks", "s3cret", "", ErrAuth},
		{"server lacks", "", "s3cret", ErrAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := startSource(t, 4, TCPConfig{Secret: []byte(tt.server)}, 1)
			dst := newDest(t, Config{Capacity: 4}, TCPConfig{Secret: []byte(tt.cli)})
			dst.SubmitHint("r", Hint{Source: src.endpoint, Keys: []uint64{1}})
			res, err := dst.Fetch(context.Background(), "r", []uint64{1})
			if tt.wantErr == nil {
				if err != nil || len(res.Local) != 1 {
					t.Fatalf("fetch: %+v %v", res, err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || len(res.Local) != 0 {
				t.Fatalf("fetch: %+v %v, want %v", res, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), "secret") {
				t.Fatalf("error %q does not name the secret option", err)
			}
			checkLocal(t, dst, nil, []uint64{1})
		})
	}
}

func TestBlockBytesMismatch(t *testing.T) {
	src := startSource(t, 4, TCPConfig{}, 1)
	dst := newDest(t, Config{Capacity: 4, BlockBytes: 2 * testBlock}, TCPConfig{BlockBytes: 2 * testBlock})
	dst.SubmitHint("r", Hint{Source: src.endpoint, Keys: []uint64{1}})
	_, err := dst.Fetch(context.Background(), "r", []uint64{1})
	if !errors.Is(err, ErrBlockSize) {
		t.Fatalf("fetch: %v, want ErrBlockSize", err)
	}
}

// TestStaleIdleConnection: the peer drops an idle pooled connection; the
// next fetch notices before any answer and redials.
func TestStaleIdleConnection(t *testing.T) {
	src := startSource(t, 4, TCPConfig{}, 1, 2)
	dst := newDest(t, Config{Capacity: 4}, TCPConfig{})
	for i, k := range []uint64{1, 2} {
		req := string(rune('a' + i))
		dst.SubmitHint(req, Hint{Source: src.endpoint, Keys: []uint64{k}})
		if i == 1 {
			dropConns(t, src.srv)
		}
		res, err := dst.Fetch(context.Background(), req, []uint64{k})
		if err != nil || len(res.Local) != 1 {
			t.Fatalf("fetch %d: %+v %v", i, res, err)
		}
	}
	if n := src.accepts.n.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (one redial)", n)
	}
}

// dropConns closes the server's connections and waits for their goroutines
// to finish with them.
func dropConns(t *testing.T, s *Server) {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	waitFor(t, "the server to drop its connections", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 0
	})
}

// TestServeUnderEviction churns the source's pool (evicting and reusing
// slots) while a peer pulls from it. Blocks are sent under a pin, so every
// block that arrives is whole: no checksum failure, no wrong bytes.
func TestServeUnderEviction(t *testing.T) {
	src := startSource(t, 4, TCPConfig{})
	// The test is about whole blocks under churn, not speed: on a loaded
	// machine the churning loop below can hold a fetch past the default
	// second.
	dst := newDest(t, Config{Capacity: 8, OperationTimeout: 5 * time.Second}, TCPConfig{})
	keys := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[i%len(keys)]
			src.r.Deposit(k, block(k), DepositOptions{})
			if i%5 == 0 {
				src.r.Evict(keys[(i+3)%len(keys)])
			}
			runtime.Gosched() // churn, but leave the fetch its turns
		}
	}()
	rounds := 200
	if testing.Short() {
		rounds = 50
	}
	var pulled int
	for i := 0; i < rounds; i++ {
		req := strconv.Itoa(i)
		dst.SubmitHint(req, Hint{Source: src.endpoint, Keys: keys})
		res, err := dst.Fetch(context.Background(), req, keys)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		pulled += len(res.Local)
		checkLocal(t, dst, res.Local, nil)
		dst.DiscardHint(req)
		dst.EvictAll()
	}
	close(stop)
	<-churned
	if pulled == 0 {
		t.Fatal("no block was ever pulled")
	}
	if st := src.r.Stats(); st.Pinned != 0 {
		t.Fatalf("source left pins: %+v", st)
	}
}
