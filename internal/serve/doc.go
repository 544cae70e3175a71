// Package serve assembles the router service, `kvrouter serve`: it checks
// the configuration, builds the routing decision core, opens NATS (embedded
// unless given), and runs the OpenAI front door, the operator views, the
// discovery follower, the --worker fleet's direct event ingest, engine
// metrics polling, load sharing with replicas and the core's housekeeping
// until it is closed.
package serve
