// Package contextlen learns how long each model's context is from the
// engines that serve it, so that the front door can refuse a prompt no
// worker would take before spending memory on it. vLLM reports
// max_model_len on each card of GET /v1/models (recent SGLang too); older
// SGLang reports context_length in GET /get_server_info.
package contextlen
