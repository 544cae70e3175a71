// This file holds one engine's port layout and the mocker and agent command lines beside it.

package cluster

import (
	"strconv"
	"time"
)

// newEngine lays out one engine's ports: HTTP, then a runner per attention
// rank, then the event and replay endpoints per DP rank, and for SGLang the
// snapshot-v1 endpoints per DP rank, each run consecutive because the
// mocker offsets a base port by the rank.
func newEngine(o *Options, id string, cur *portCursor) Engine {
	e := Engine{ID: id, TP: o.TP, DP: o.DP}
	e.URL = "http://" + hostPort(cur.take(1))
	control := cur.take(o.DP * o.TP)
	for a := range o.DP * o.TP {
		e.Control = append(e.Control, "tcp://"+hostPort(control+a))
	}
	events, replay := cur.take(o.DP), cur.take(o.DP)
	for d := range o.DP {
		e.Events = append(e.Events, "tcp://"+hostPort(events+d))
		e.Replay = append(e.Replay, "tcp://"+hostPort(replay+d))
	}
	if o.snapshots() {
		snap := cur.take(o.DP)
		for d := range o.DP {
			e.Snapshot = append(e.Snapshot, "tcp://"+hostPort(snap+d))
		}
	}
	e.Bootstrap = cur.take(1)
	return e
}

// snapshots says whether the engines serve snapshot-v1: SGLang's do.
func (o *Options) snapshots() bool { return o.Flavor == "sglang" }

// engineArgs is the `kvrouter mocker` command line of e. The engine dials
// its agent with the events (llm-d's connect mode) rather than binding
// them: a binding engine must bind a wildcard address, and the cluster
// stays on loopback.
func engineArgs(o *Options, e Engine) []string {
	args := []string{"mocker",
		"--flavor", o.Flavor,
		"--listen", e.URL[len("http://"):],
		"--control-port", portOf(e.Control[0]),
		"--kv-events-connect", e.Events[0],
		"--kv-events-replay-endpoint", e.Replay[0],
		"--dp", strconv.Itoa(o.DP),
		"--tp", strconv.Itoa(o.TP),
		"--log-level", o.LogLevel,
	}
	ints := []struct {
		flag string
		v    int
	}{
		{"--block-size", o.BlockSize},
		{"--kv-bytes-per-token", o.KVBytesPerToken},
		{"--gpu-blocks", o.GPUBlocks},
		{"--runner-blocks", o.RunnerBlocks},
	}
	for _, f := range ints {
		if f.v != 0 {
			args = append(args, f.flag, strconv.Itoa(f.v))
		}
	}
	if len(e.Snapshot) > 0 {
		args = append(args, "--kv-events-snapshot-endpoint", e.Snapshot[0])
	}
	if o.PrefillPerToken != 0 {
		args = append(args, "--prefill-us-per-token", fmtFloat(float64(o.PrefillPerToken)/float64(time.Microsecond)))
	}
	if o.DecodePerToken != 0 {
		args = append(args, "--decode-ms-per-token", fmtFloat(float64(o.DecodePerToken)/float64(time.Millisecond)))
	}
	if o.Speedup != 0 {
		args = append(args, "--speedup", fmtFloat(o.Speedup))
	}
	if e.Role != "" {
		args = append(args, "--role", e.Role)
	}
	if e.Bootstrap != 0 {
		args = append(args, "--bootstrap-port", strconv.Itoa(e.Bootstrap))
	}
	return append(args, o.EngineFlags...)
}

// agentArgs is the `kvrouter agent` command line beside e.
func agentArgs(o *Options, e Engine, nats string) []string {
	args := []string{"agent",
		"--engine", o.Flavor,
		"--engine-url", e.URL,
		"--nats", nats,
		"--worker-id", e.ID,
		"--single-host",
	}
	return append(args, o.AgentFlags...)
}

func portOf(endpoint string) string {
	for i := len(endpoint) - 1; i >= 0; i-- {
		if endpoint[i] == ':' {
			return endpoint[i+1:]
		}
	}
	return endpoint
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
