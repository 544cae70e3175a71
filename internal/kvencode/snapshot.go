// This file holds SGLang's snapshot-v1 payloads as its publisher writes them: the header and the chunks of block records.

package kvencode

import "kvrouter/internal/kvevents"

// AppendSnapshotHeader appends h as SGLang encodes its KVSnapshotHeader: a
// msgpack array of its seven fields in declaration order.
func AppendSnapshotHeader(dst []byte, h kvevents.SnapshotHeader) []byte {
	b := appendArrayLen(dst, 7)
	b = appendInt(b, h.Version)
	b = appendStr(b, h.Epoch)
	b = appendInt(b, h.ReplicaRank)
	b = appendUint(b, h.ResumeSeq)
	b = appendUint(b, h.BarrierSeq)
	b = appendStr(b, h.BarrierID)
	return appendUint(b, h.RecordCount)
}

// AppendSnapshotChunk appends one chunk of records as SGLang encodes a list
// of KVSnapshotBlock: [parent_block_hash or nil, [block_hash, ...]], hashes
// signed as SGLang's page hashes are.
func AppendSnapshotChunk(dst []byte, blocks []kvevents.SnapshotBlock) []byte {
	b := appendArrayLen(dst, len(blocks))
	for _, r := range blocks {
		b = appendArrayLen(b, 2)
		if r.HasParent {
			b = appendHash(b, r.Parent, true)
		} else {
			b = append(b, 0xc0)
		}
		b = appendArrayLen(b, len(r.Hashes))
		for _, h := range r.Hashes {
			b = appendHash(b, h, true)
		}
	}
	return b
}
