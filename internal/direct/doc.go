// Package direct brings up the router service's --worker engines, the
// fleets without state agents: it learns each engine's model, registers
// it with the routing decision core, and ingests the engine's own KV event
// stream, dialed (events=) or taken on --events-bind, into the core. A
// worker whose events never arrive is routed in approximate mode.
package direct
