//go:build !linux

package tokenizer

import "testing"

func loopCPU(b *testing.B, f func()) {
	for b.Loop() {
		f()
	}
}
