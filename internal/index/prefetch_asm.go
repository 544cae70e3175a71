// This file holds the declaration of prefetch, written in assembly for amd64 and arm64.

//go:build amd64 || arm64

package index

// prefetch asks the CPU to start loading the cache lines at addrs and
// returns at once, without waiting for them (the addresses need not be
// valid: a prefetch never faults).
//
//go:noescape
func prefetch(addrs []uintptr)
