// Package enginemetrics polls each worker's Prometheus /metrics (vLLM's,
// SGLang's or the simulated engine's names) for the engine's own view of
// its load per DP rank, and hands it to the routing decision core: it sees
// requests other routers, or clients going around the router, sent.
package enginemetrics
