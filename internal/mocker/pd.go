// This file holds the engine's part in disaggregated serving: the prefill role keeping a request's
// blocks for a decode engine, the decode role pulling them, and SGLang's bootstrap server.

package mocker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvrouter/internal/runner"
)

// Roles (--role). A prefill engine computes a request's prompt and keeps
// its blocks in its runner until the decode engine pulled them over the
// runner transport (TCP); the decode engine pulls them, restores them, and
// generates: the same bytes as a recompute, so the same output as one
// engine running the whole request.
//
// The hand-over follows each engine's protocol as the router speaks it
// (docs/wire.md §11). vLLM: the prefill leg carries kv_transfer_params
// {"do_remote_decode": true, ...} and is answered with kv_transfer_params
// naming the prefill's runner (remote_host, remote_port) and the blocks
// (remote_block_ids: engine block hashes, the runner's keys); the decode
// leg carries them back. SGLang: both legs carry bootstrap_host,
// bootstrap_port and bootstrap_room; the decode engine asks the prefill's
// bootstrap server for the room, which answers once the prefill is done
// with the same runner endpoint and blocks. NIXL and Mooncake move GPU
// memory instead, between engines the router never sees the inside of;
// what the router sends and reads is the same.
const (
	RoleAggregated = "aggregated"
	RolePrefill    = "prefill"
	RoleDecode     = "decode"

	// DefaultBootstrapPort is SGLang's disaggregation_bootstrap_port.
	DefaultBootstrapPort = 8998
	// DefaultKVTransferTimeout is how long a hand-over may take.
	DefaultKVTransferTimeout = 30 * time.Second
)

// Wire names of the hand-over.
const (
	pathBootstrapRoom = "/kvrouter/bootstrap/" // + room: where a room's KV is (SGLang flavour, on the bootstrap port)
	pathKVRelease     = "/kvrouter/kv_release" // a decode engine is done pulling
	queryWaitMS       = "wait_ms"
	roomPrefix        = "room:"
	kvRoleProducer    = "kv_producer"
	kvRoleConsumer    = "kv_consumer"

	metricKVTransfers = "kvrouter_mocker_kv_transfers_total"
	labelLeg          = "leg"
	outcomeReleased   = "released" // prefill: the decode engine said it pulled
	outcomeExpired    = "expired"  // prefill: nobody pulled within the timeout
	outcomeUnserved   = "unserved" // decode: the prefill's blocks could not be found
)

// kvTransferParams are the members of vLLM's kv_transfer_params the
// disaggregated hand-over reads (NixlConnector's).
type kvTransferParams struct {
	DoRemoteDecode  bool     `json:"do_remote_decode"`
	DoRemotePrefill bool     `json:"do_remote_prefill"`
	RemoteEngineID  *string  `json:"remote_engine_id"`
	RemoteRequestID *string  `json:"remote_request_id"`
	RemoteBlockIDs  []uint64 `json:"remote_block_ids"`
	RemoteHost      *string  `json:"remote_host"`
	RemotePort      *int     `json:"remote_port"`
}

// transfer is a request's part in a hand-over.
type transfer struct {
	// export: a prefill leg, whose blocks a decode engine pulls.
	export bool
	// room is SGLang's bootstrap room (both legs).
	room uint64
	// A decode leg: vLLM names the source and blocks; SGLang names the
	// bootstrap server that knows them.
	source    string
	keys      []uint64
	bootstrap string // host:port
	// release is where to say the pull is done (vLLM: the prefill's
	// engine id, its HTTP host:port) under id.
	release, id string
}

// transfer reads a request's hand-over, as the engine's flavour and role
// take it; nil for a whole request.
func (p *parser) transfer(b *commonBody) (*transfer, error) {
	if p.cfg.Flavor == SGLang {
		if p.cfg.Role == RoleAggregated {
			return nil, nil // disaggregation_mode null: the fields mean nothing
		}
		if b.BootstrapHost == nil || *b.BootstrapHost == "" || b.BootstrapPort == nil || b.BootstrapRoom == nil {
			return nil, badRequest("this engine is a %s engine (disaggregation_mode %s): it serves only requests a router split, "+
				"with bootstrap_host, bootstrap_port and bootstrap_room", p.cfg.Role, p.cfg.Role)
		}
		if *b.BootstrapPort < 1 || *b.BootstrapPort > 65535 {
			return nil, badRequest("bootstrap_port: %d is not a port", *b.BootstrapPort)
		}
		t := &transfer{room: *b.BootstrapRoom, export: p.cfg.Role == RolePrefill, id: roomPrefix + strconv.FormatUint(*b.BootstrapRoom, 10)}
		if !t.export {
			t.bootstrap = net.JoinHostPort(*b.BootstrapHost, strconv.Itoa(*b.BootstrapPort))
		}
		return t, nil
	}
	kv := b.KVTransferParams
	switch {
	case kv == nil || (!kv.DoRemoteDecode && !kv.DoRemotePrefill):
		return nil, nil
	case kv.DoRemoteDecode && kv.DoRemotePrefill:
		return nil, badRequest("kv_transfer_params: do_remote_decode and do_remote_prefill are both true")
	case kv.DoRemoteDecode:
		if p.cfg.Role == RoleDecode {
			return nil, badRequest("kv_transfer_params.do_remote_decode: this engine is a decode engine (%s); send the prefill leg to a prefill engine", kvRoleConsumer)
		}
		return &transfer{export: true}, nil
	}
	if p.cfg.Role == RolePrefill {
		return nil, badRequest("kv_transfer_params.do_remote_prefill: this engine is a prefill engine (%s); send the decode leg to a decode engine", kvRoleProducer)
	}
	if kv.RemoteHost == nil || *kv.RemoteHost == "" || kv.RemotePort == nil || *kv.RemotePort < 1 || *kv.RemotePort > 65535 {
		return nil, badRequest("kv_transfer_params: do_remote_prefill needs remote_host and remote_port, the prefill engine's answer")
	}
	t := &transfer{source: "tcp://" + net.JoinHostPort(*kv.RemoteHost, strconv.Itoa(*kv.RemotePort)), keys: kv.RemoteBlockIDs}
	if kv.RemoteEngineID != nil && kv.RemoteRequestID != nil {
		t.release, t.id = *kv.RemoteEngineID, *kv.RemoteRequestID
	}
	return t, nil
}

// disagg is an engine's side of hand-overs: the blocks it keeps for decode
// engines (prefill), and the bootstrap server (SGLang prefill).
type disagg struct {
	e      *Engine
	ctx    context.Context
	client *http.Client

	mu      sync.Mutex
	held    map[string]*export
	waiting map[string]chan struct{} // rooms asked for before their prefill was done

	ln        net.Listener
	srv       *http.Server
	transfers *prometheus.CounterVec
}

// export is one request's blocks kept for a decode engine.
type export struct {
	source   string
	keys     []uint64
	claims   []*runner.Claim
	released chan struct{}
	once     sync.Once
}

func (x *export) release() { x.once.Do(func() { close(x.released) }) }

func newDisagg(e *Engine, ctx context.Context) *disagg {
	d := &disagg{
		e: e, ctx: ctx, held: map[string]*export{}, waiting: map[string]chan struct{}{},
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}},
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricKVTransfers,
			Help: "Disaggregated hand-overs by leg and outcome: prefill released (the decode engine pulled) or expired " +
				"(--kv-transfer-timeout); decode restored, partial, failed (recomputed), local (held already) or unserved (the prefill had nothing).",
		}, []string{labelLeg, labelOutcome}),
	}
	e.metrics.reg.MustRegister(d.transfers)
	return d
}

// start opens the bootstrap server of an SGLang prefill engine.
func (d *disagg) start() error {
	c := &d.e.cfg
	if c.Flavor != SGLang || c.Role != RolePrefill {
		return nil
	}
	addr := net.JoinHostPort(d.e.httpHost(), strconv.Itoa(c.BootstrapPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mocker: --bootstrap-port %d: %w", c.BootstrapPort, err)
	}
	d.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathBootstrapRoom+"{room}", d.handleRoom)
	mux.HandleFunc("POST "+pathKVRelease, d.handleRelease)
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return d.ctx }}
	d.e.wg.Go(func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.e.log.Error("bootstrap server stopped", "err", err)
		}
	})
	return nil
}

func (d *disagg) close() {
	if d.srv != nil {
		_ = d.srv.Close()
	}
}

// BootstrapAddr is the bootstrap server's address (SGLang prefill), or nil.
func (e *Engine) BootstrapAddr() net.Addr {
	if e.pd == nil || e.pd.ln == nil {
		return nil
	}
	return e.pd.ln.Addr()
}

// keep holds the blocks of j's prompt that its rank's runner holds (the
// leading run of them) for a decode engine to pull, under id, until it
// says it is done or the transfer timeout passes.
func (d *disagg) keep(j *job, id string) *export {
	r := j.rank
	x := &export{source: d.e.ControlEndpoint(r.id), released: make(chan struct{})}
	for _, k := range j.seq.Keys {
		cs, ok := r.tier.claim(k)
		if !ok {
			break
		}
		x.claims = append(x.claims, cs...)
		x.keys = append(x.keys, k)
	}
	d.mu.Lock()
	if old := d.held[id]; old != nil {
		old.release() // a request id used again: the newer blocks count
	}
	d.held[id] = x
	if ch := d.waiting[id]; ch != nil {
		close(ch)
		delete(d.waiting, id)
	}
	d.mu.Unlock()
	d.e.wg.Go(func() {
		outcome := outcomeReleased
		select {
		case <-x.released:
		case <-time.After(d.e.cfg.KVTransferTimeout):
			outcome = outcomeExpired
		case <-d.ctx.Done():
			outcome = outcomeExpired
		}
		d.mu.Lock()
		if d.held[id] == x {
			delete(d.held, id)
		}
		d.mu.Unlock()
		for _, c := range x.claims {
			c.Release()
		}
		d.transfers.WithLabelValues(RolePrefill, outcome).Inc()
	})
	return x
}

// exportParams keeps j's blocks and returns what the prefill answers: vLLM's
// kv_transfer_params, naming the runner and blocks; nil for SGLang, whose
// decode engine asks the bootstrap server.
func (e *Engine) exportParams(j *job, kv *transfer) json.RawMessage {
	if e.cfg.Flavor == SGLang {
		e.pd.keep(j, kv.id)
		return nil
	}
	x := e.pd.keep(j, j.seq.ID)
	keys := x.keys
	if keys == nil {
		keys = []uint64{}
	}
	b, _ := json.Marshal(map[string]any{
		"do_remote_prefill": true,
		"do_remote_decode":  false,
		"remote_block_ids":  keys,
		"remote_engine_id":  e.engineID(),
		"remote_request_id": j.seq.ID,
		"remote_host":       e.cfg.AdvertiseHost,
		"remote_port":       e.cfg.controlPort(j.rank.id, 0),
		"tp_size":           e.cfg.TP,
	}) // strings, numbers and bools always marshal
	return b
}

// engineID names the engine to its peers: its HTTP host:port, where a
// decode engine says it is done pulling (NIXL notifies the prefill engine
// for the same purpose).
func (e *Engine) engineID() string {
	return net.JoinHostPort(e.cfg.AdvertiseHost, strconv.Itoa(e.httpPort()))
}

// roomView is the bootstrap server's answer about a room.
type roomView struct {
	Source string   `json:"source_control_endpoint"`
	Keys   []uint64 `json:"block_hashes"`
}

// handleRoom answers where a room's blocks are, waiting up to wait_ms for
// the prefill to be done: the decode leg usually arrives first.
func (d *disagg) handleRoom(w http.ResponseWriter, r *http.Request) {
	room, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
	if err != nil {
		writeError(w, badRequest("room %q is not a bootstrap room", r.PathValue("room")))
		return
	}
	wait, _ := strconv.Atoi(r.URL.Query().Get(queryWaitMS))
	id := roomPrefix + strconv.FormatUint(room, 10)
	timer := time.NewTimer(time.Duration(max(0, wait)) * time.Millisecond)
	defer timer.Stop()
	for {
		d.mu.Lock()
		x := d.held[id]
		var ch chan struct{}
		if x == nil {
			if ch = d.waiting[id]; ch == nil {
				ch = make(chan struct{})
				d.waiting[id] = ch
			}
		}
		d.mu.Unlock()
		if x != nil {
			keys := x.keys
			if keys == nil {
				keys = []uint64{}
			}
			writeJSON(w, http.StatusOK, roomView{Source: x.source, Keys: keys})
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			d.forget(id, ch)
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no prefill is done for " + id})
			return
		case <-r.Context().Done():
			d.forget(id, ch)
			return
		}
	}
}

// forget drops a wait nobody else shares... or leaves it to the others:
// a channel is closed only by keep, so dropping it is safe either way.
func (d *disagg) forget(id string, ch chan struct{}) {
	d.mu.Lock()
	if d.waiting[id] == ch {
		delete(d.waiting, id)
	}
	d.mu.Unlock()
}

type releaseBody struct {
	ID string `json:"transfer_id"`
}

// handleRelease lets go of blocks a decode engine has pulled.
func (d *disagg) handleRelease(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var b releaseBody
	if err := decodeBody(body, &b); err != nil {
		writeError(w, err)
		return
	}
	d.mu.Lock()
	x := d.held[b.ID]
	d.mu.Unlock()
	if x != nil {
		x.release()
	}
	w.WriteHeader(http.StatusNoContent)
}

var errKVTransfer = errors.New("KV hand-over failed")

// receive pulls a decode leg's blocks from the prefill engine's runner,
// beyond what the rank holds itself; what it cannot pull is recomputed. An
// SGLang decode engine that cannot learn where the blocks are fails the
// request, as SGLang's does.
func (e *Engine) receive(ctx context.Context, j *job, kv *transfer) error {
	if kv.bootstrap != "" {
		v, err := e.pd.ask(ctx, kv.bootstrap, kv.room)
		if err != nil {
			e.pd.transfers.WithLabelValues(RoleDecode, outcomeUnserved).Inc()
			return fmt.Errorf("%w: bootstrap room %d at %s: %v", errKVTransfer, kv.room, kv.bootstrap, err)
		}
		kv.source, kv.keys, kv.release = v.Source, v.Keys, kv.bootstrap
	}
	outcome := e.pullPeer(ctx, j, kv.source, kv.keys)
	j.report = nil // a hand-over's cost is the disaggregation's, not a hint's
	e.pd.transfers.WithLabelValues(RoleDecode, outcome).Inc()
	if kv.release != "" && kv.id != "" {
		e.wg.Go(func() { e.pd.tellReleased(kv.release, kv.id) })
	}
	return nil
}

// ask asks an SGLang prefill engine's bootstrap server where a room's
// blocks are, waiting for its prefill up to the transfer timeout.
func (d *disagg) ask(ctx context.Context, bootstrap string, room uint64) (roomView, error) {
	wait := d.e.cfg.KVTransferTimeout
	ctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
	defer cancel()
	u := "http://" + bootstrap + pathBootstrapRoom + strconv.FormatUint(room, 10) + "?" +
		url.Values{queryWaitMS: {strconv.FormatInt(wait.Milliseconds(), 10)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return roomView{}, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return roomView{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return roomView{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return roomView{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var v roomView
	if err := json.Unmarshal(b, &v); err != nil || v.Source == "" {
		return roomView{}, fmt.Errorf("answer %q: want {source_control_endpoint, block_hashes}", b)
	}
	return v, nil
}

// tellReleased tells the prefill engine at hostPort that transfer id was
// pulled; if that fails, the prefill lets go at its timeout.
func (d *disagg) tellReleased(hostPort, id string) {
	ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
	defer cancel()
	b, _ := json.Marshal(releaseBody{ID: id})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+hostPort+pathKVRelease, bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set(headerContentType, contentJSON)
	resp, err := d.client.Do(req)
	if err != nil {
		d.e.log.Debug("could not tell the prefill engine the blocks were pulled", "engine", hostPort, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
