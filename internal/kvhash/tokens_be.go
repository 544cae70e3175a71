// This file holds token ids as hashed bytes on big-endian machines: copied little-endian.

//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package kvhash

import "encoding/binary"

// tokenBytes writes tokens as little-endian bytes into buf.
func tokenBytes(tokens []uint32, buf []byte) []byte {
	buf = buf[:len(tokens)*4]
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[i*4:i*4+4], t)
	}
	return buf
}

const littleEndian = false
