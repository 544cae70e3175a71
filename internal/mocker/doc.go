// Package mocker is a simulated LLM inference engine (vLLM or SGLang
// flavour) that needs no GPU yet keeps the whole KV path real: its KV
// blocks hold bytes, every computed block is written through to a real KV
// cache runner (internal/runner) that serves peers over TCP, a request's
// kv.fetch hint makes the runner pull blocks from a peer, and the output
// depends on the KV bytes actually held, so a restore that brought other
// bytes than a recompute would change the answer.
//
// Per DP rank the engine has a GPU block pool with prefix caching and LRU
// eviction, a scheduler with continuous batching and chunked prefill (the
// pure core in sched.go and pool.go, which takes no sockets, clocks or
// goroutines), a runner shard per TP rank on control_port + attention rank,
// and a ZMQ event publisher on the rank's offset port emitting exactly the
// flavour's KV event wire. Simulated time (prefill cost per token, decode
// cost per step, the fixed setup of a peer pull) runs on an injected clock,
// compressed by Speedup; a peer pull's transfer takes its real time.
//
// The HTTP API is OpenAI-compatible (completions and chat, streaming or
// not), with vLLM's /tokenize, SGLang's /get_server_info or a vLLM engine
// arguments endpoint that the state agent's validation accepts, Prometheus
// metrics, and admin endpoints to evict blocks and reset caches. It
// tokenizes with the embedded demo tokenizer, or with a model's own
// tokenizer files and chat template (Config.Tokenizer), and serves LoRA
// adapters (Config.LoRAs) named as each flavour's engine names them, their
// blocks cached, hashed and reported apart from the base model's.
package mocker
