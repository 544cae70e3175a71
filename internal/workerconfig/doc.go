// Package workerconfig turns an inference engine's configuration into the
// descriptor the state agent works from (docs/wire.md §2, §5): where each DP rank
// publishes KV events, the registration runtime data of a hint-capable
// worker, its runners' control endpoints and its cache owners.
//
// It is pure: no sockets, no clocks. Reading an "@path" extra config and
// resolving a host name for the loopback check go through functions in
// Options, so the agent passes os.ReadFile and net.LookupHost and tests pass
// tables.
//
// # Two outcomes
//
// A configuration that cannot run as written — malformed JSON, a bad or
// bool port, an unspecified, wildcard or loopback advertise host, a HiCache
// option in linker mode, the legacy local_dram_bytes, a missing
// publish_inventory — is an error matching ErrInvalidConfig (and a narrower
// sentinel), and the message names the option in the operator's words.
// Options.AllowLoopback lifts the loopback rule for single-host clusters,
// where every peer can dial loopback; the descriptor records it (SingleHost).
//
// A valid configuration that hints cannot use yet gives a descriptor with
// HintCapable false and Refusal saying why; the worker stays a plain routing
// target and its descriptor carries no hint runtime data, endpoints or
// owners, so it is never half-registered.
//
// # What is supported beyond the upstream gates
//
// Tensor parallelism: every attention rank's runner binds control_port +
// engine_global_attention_rank and holds its shard of each page. The
// descriptor lists, per DP rank, all TP ranks' endpoints; the first is the
// one advertised. Inventory aggregation "all_tp_ranks" tells the agent to
// publish a runner-owned block of a DP rank only while every TP rank's
// runner holds it, and to withdraw it at the first removal, since a peer
// pulling the block needs all shards. vLLM's connector reports through the
// engine core's scheduler, which already speaks for all of its TP workers
// (aggregation "engine").
//
// Data parallelism, with or without SGLang attention DP: DP rank d's port
// block starts at control_port + d*stride, stride = tp_size / dp_size under
// attention DP with dp_size > 1, else 1. Endpoints use the engine-local rank
// for ports and the global rank (DPStart + local) as keys. Pure DP with
// tp_size > 1 is refused: stride 1 makes neighbouring replicas' blocks
// overlap.
//
// Several tokenizer workers: they only tokenize and forward requests (a hint
// travels inside the request); the schedulers alone allocate KV pages, run
// the runners and publish events, so placement is unchanged.
//
// Still refused: pipeline parallel (a stage holds only its layers and the
// port rule gives all stages the same port), context parallel (a page is
// split by token position), multi-node engines (one advertised host cannot
// name runners on other hosts).
//
// # Cache owners
//
// Runner-owned blocks belong to a cache owner id, semantics:scope/dc/slot in
// lowercase hex (docs/wire.md §5.7). An operator may pin them in the runner options
// (SGLang hicache_storage_backend_extra_config, vLLM secondary tier):
// "owner_id" for a one-rank worker, or "owner_ids" as a list in local DP rank
// order or an object keyed by global DP rank. They are checked for format,
// uniqueness and exact coverage of the DP range. Otherwise DeriveOwnerID
// derives them from model, advertised control endpoint and DP rank, so a
// restarted worker keeps its owners. Note that a KVCR linker that rejects
// unknown options will refuse owner_id(s) in its own extra config; derive
// in that case.
//
// # Event endpoints
//
// Engines offset event ports by DP rank (SGLang by its engine-local
// attention DP rank, vLLM by the engine core's global data_parallel_rank).
// A wildcard bind address such as tcp://*:5557 is turned into a dialable
// one with Options.AdvertiseHost, else the runner's advertised host, else
// the engine's host argument, else 127.0.0.1 (the agent runs beside its
// engine). inproc:// endpoints are refused: the agent is another process.
// Whether the PUB binds follows each engine's own rule: newer SGLang binds
// tcp://0.0.0.0, vLLM connects to it, which is refused since it names no
// host. The replay and (SGLang) snapshot ROUTERs are offset per rank too,
// and every bound port of a worker must be its own.
//
// # Extra config files
//
// SGLang reads an "@path" extra config as JSON, TOML or YAML by extension.
// The agent reads only JSON and refuses the others by name rather than
// misread them.
package workerconfig
