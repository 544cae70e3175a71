// Package transferbench measures the runner's peer pull bandwidth between
// two processes, side by side with a plain single-stream TCP copy of the
// same bytes between the same two processes, so the ratio shows what the
// protocol (framing, checksums, pool bookkeeping) costs over raw TCP.
package transferbench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"kvrouter/internal/runner"
)

// Config sizes a run.
type Config struct {
	BlockBytes   int // bytes per block (default 2 MiB)
	Blocks       int // blocks pulled per round (default 256)
	Rounds       int // measured rounds, after one warm-up (default 5)
	SocketBuffer int // SO_SNDBUF/SO_RCVBUF for both streams; 0 keeps autotuning
}

const (
	DefaultBlockBytes = 2 << 20
	DefaultBlocks     = 256
	DefaultRounds     = 5
)

// ErrConfig: a Config value is out of range; the message names the flag.
var ErrConfig = errors.New("invalid transfer benchmark configuration")

func (c Config) withDefaults() (Config, error) {
	if c.BlockBytes == 0 {
		c.BlockBytes = DefaultBlockBytes
	}
	if c.Blocks == 0 {
		c.Blocks = DefaultBlocks
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	switch {
	case c.BlockBytes < 0 || c.BlockBytes > 1<<30:
		return c, fmt.Errorf("%w: --block-bytes %d must be in 1..1GiB", ErrConfig, c.BlockBytes)
	case c.Blocks < 0 || c.Blocks > 1<<20:
		return c, fmt.Errorf("%w: --blocks %d must be in 1..1048576", ErrConfig, c.Blocks)
	case c.Rounds < 0 || c.Rounds > 1000:
		return c, fmt.Errorf("%w: --rounds %d must be in 1..1000", ErrConfig, c.Rounds)
	case int64(c.BlockBytes)*int64(c.Blocks) > 16<<30:
		return c, fmt.Errorf("%w: --block-bytes × --blocks exceeds 16 GiB", ErrConfig)
	}
	return c, nil
}

// Result is one run's figures; bandwidths are medians over rounds, in
// gigabits per second (1e9 bit/s).
type Result struct {
	PullGbps    float64 `json:"pull_gbps"`
	TCPCopyGbps float64 `json:"tcp_copy_gbps"`
	Ratio       float64 `json:"ratio"`
	BlockBytes  int     `json:"block_bytes"`
	Blocks      int     `json:"blocks"`
	Rounds      int     `json:"rounds"`
}

// addrs is the line the source process prints once it serves.
type addrs struct {
	Pull string `json:"pull"` // runner peer endpoint, tcp://host:port
	Copy string `json:"copy"` // raw copy listener, host:port
}

// Key of block i on the source: any fixed mapping works.
func key(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + 1 }

// Serve is the source process: it fills a runner with cfg.Blocks blocks,
// serves them over the runner's protocol and over a raw copy listener,
// prints the two addresses as one JSON line on out, and serves until in
// reaches EOF (the parent closed it, or died).
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	r, err := runner.New(runner.Config{BlockBytes: cfg.BlockBytes, Capacity: cfg.Blocks})
	if err != nil {
		return err
	}
	defer r.Close()
	buf := make([]byte, cfg.BlockBytes)
	for i := 0; i < cfg.Blocks; i++ {
		for j := 0; j < len(buf); j += 8 {
			binary.LittleEndian.PutUint64(buf[j:], key(i)+uint64(j))
		}
		if _, err := r.Deposit(key(i), buf, runner.DepositOptions{}); err != nil {
			return err
		}
	}
	srv, err := runner.NewServer(r, runner.TCPConfig{BlockBytes: cfg.BlockBytes, SocketBuffer: cfg.SocketBuffer, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pl.Close()
		return err
	}
	go srv.Serve(pl)
	defer srv.Close()
	copyDone := make(chan struct{})
	go func() {
		defer close(copyDone)
		serveCopy(cl, r, cfg)
	}()
	defer func() { cl.Close(); <-copyDone }()

	line, _ := json.Marshal(addrs{Pull: "tcp://" + pl.Addr().String(), Copy: cl.Addr().String()})
	if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
		return err
	}
	stopped := make(chan struct{})
	go func() { io.Copy(io.Discard, in); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
	return nil
}

// serveCopy answers each 8-byte request (a block count) with that many of
// the runner's blocks, raw, from the same memory the pull serves.
func serveCopy(l net.Listener, r *runner.Runner, cfg Config) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok && cfg.SocketBuffer > 0 {
			tc.SetReadBuffer(cfg.SocketBuffer)
			tc.SetWriteBuffer(cfg.SocketBuffer)
		}
		go func() {
			defer c.Close()
			var req [8]byte
			for {
				if _, err := io.ReadFull(c, req[:]); err != nil {
					return
				}
				n := int(binary.BigEndian.Uint64(req[:]))
				for i := 0; i < n; i++ {
					cl, err := r.Read(key(i % cfg.Blocks))
					if err != nil {
						return
					}
					_, err = c.Write(cl.Bytes())
					cl.Release()
					if err != nil {
						return
					}
				}
			}
		}()
	}
}

// Run starts the source process with cmd (stdin and stdout are wired
// here), then measures rounds of pull and copy, alternating.
func Run(ctx context.Context, cfg Config, cmd *exec.Cmd) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return Result{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("start source process: %w", err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		return Result{}, fmt.Errorf("source process did not report its addresses: %w", err)
	}
	var a addrs
	if err := json.Unmarshal(line, &a); err != nil {
		return Result{}, fmt.Errorf("source process address line %q: %w", line, err)
	}
	return measure(ctx, cfg, a)
}

func measure(ctx context.Context, cfg Config, a addrs) (Result, error) {
	tr, err := runner.NewTCPTransport(runner.TCPConfig{BlockBytes: cfg.BlockBytes, SocketBuffer: cfg.SocketBuffer})
	if err != nil {
		return Result{}, err
	}
	defer tr.Close()
	// A whole round must fit the operation deadline, which exists for
	// per-request prefixes, not bulk benchmarks.
	r, err := runner.New(runner.Config{
		BlockBytes: cfg.BlockBytes, Capacity: cfg.Blocks, Transport: tr,
		OperationTimeout: 10 * time.Minute, AbandonTimeout: 10 * time.Minute,
	})
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	conn, err := net.Dial("tcp", a.Copy)
	if err != nil {
		return Result{}, fmt.Errorf("dial copy listener: %w", err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok && cfg.SocketBuffer > 0 {
		tc.SetReadBuffer(cfg.SocketBuffer)
		tc.SetWriteBuffer(cfg.SocketBuffer)
	}
	keys := make([]uint64, cfg.Blocks)
	for i := range keys {
		keys[i] = key(i)
	}
	// The copy lands in memory the size of the pull's pool, block by
	// block, so both transfers keep every byte they moved.
	buf := make([]byte, cfg.BlockBytes*cfg.Blocks)
	bits := float64(cfg.BlockBytes) * float64(cfg.Blocks) * 8
	var pulls, copies []float64
	for round := 0; round <= cfg.Rounds; round++ {
		r.EvictAll()
		req := "bench-" + strconv.Itoa(round)
		if err := r.SubmitHint(req, runner.Hint{Source: a.Pull, Keys: keys}); err != nil {
			return Result{}, err
		}
		start := time.Now()
		res, err := r.Fetch(ctx, req, keys)
		pull := time.Since(start)
		r.DiscardHint(req)
		if err != nil {
			return Result{}, fmt.Errorf("pull round %d: %w", round, err)
		}
		if len(res.Local) != cfg.Blocks {
			return Result{}, fmt.Errorf("pull round %d: %d of %d blocks arrived", round, len(res.Local), cfg.Blocks)
		}

		start = time.Now()
		var reqb [8]byte
		binary.BigEndian.PutUint64(reqb[:], uint64(cfg.Blocks))
		if _, err := conn.Write(reqb[:]); err != nil {
			return Result{}, fmt.Errorf("copy round %d: %w", round, err)
		}
		for i := 0; i < cfg.Blocks; i++ {
			if _, err := io.ReadFull(conn, buf[i*cfg.BlockBytes:(i+1)*cfg.BlockBytes]); err != nil {
				return Result{}, fmt.Errorf("copy round %d: %w", round, err)
			}
		}
		cp := time.Since(start)
		if round == 0 {
			continue // warm-up: connection setup, first touch of pool memory
		}
		pulls = append(pulls, bits/pull.Seconds()/1e9)
		copies = append(copies, bits/cp.Seconds()/1e9)
	}
	res := Result{PullGbps: median(pulls), TCPCopyGbps: median(copies), BlockBytes: cfg.BlockBytes, Blocks: cfg.Blocks, Rounds: cfg.Rounds}
	res.Ratio = res.PullGbps / res.TCPCopyGbps
	return res, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
