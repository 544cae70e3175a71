// Package follow keeps the routing decision core in step with the worker
// registry: it watches discovery, adds, updates and removes the workers
// state agents register, and runs one relay follower per agent that feeds
// the agent's cache inventory (snapshot first, then live changes) into the
// core. While the watch is lost, no hint names an agent-registered source.
package follow
