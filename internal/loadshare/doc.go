// Package loadshare shares the requests in flight between router service
// replicas on one NATS: each announces the requests it sends, batched, and
// heartbeats the list of those still running, so every replica weighs the
// load all of them put on a rank; a replica that stops announcing is
// forgotten with its load.
package loadshare
