// This file holds prefetch where there is no prefetch instruction: it does nothing.

//go:build !amd64 && !arm64

package index

// prefetch is a hint; without a prefetch instruction it does nothing.
func prefetch(addrs []uintptr) {}
