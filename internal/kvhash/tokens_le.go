// This file holds token ids as hashed bytes on little-endian machines: their memory as is.

//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package kvhash

import "unsafe"

// tokenBytes views tokens as the little-endian bytes the hash is defined
// over. On little-endian machines that is their memory as is, so hashing
// needs no copy.
func tokenBytes(tokens []uint32, _ []byte) []byte {
	if len(tokens) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), len(tokens)*4)
}

const littleEndian = true
