// This file holds the JSON lines of `kvrouter decode`: one object per decoded batch.

package kvevents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// BatchJSON renders a batch as one JSON object, the line format of
// `kvrouter decode`. Hashes are unsigned decimals (JSON numbers beyond 2^53
// lose precision in JavaScript, but operators compare them with what
// engines log, which is these digits).
type BatchJSON struct {
	Batch Batch
	// Frame, when set, adds its "topic" and "seq" first.
	Frame *Frame
}

// The shapes of the decode command's output. The keys mirror the engine
// wire names today but are our own format: an upstream rename must not
// change what scripts reading our output see. Fields print in declaration
// order, each kind of event with its own fields.
type (
	batchView struct {
		Topic  *string  `json:"topic,omitempty"`
		Seq    *uint64  `json:"seq,omitempty"`
		TS     *float64 `json:"ts"` // nil for NaN and infinities, which JSON lacks
		DPRank *int     `json:"dp_rank"`
		Events []any    `json:"events"`
	}
	storedView struct {
		Type        string   `json:"type"`
		BlockHashes []uint64 `json:"block_hashes"`
		Parent      *uint64  `json:"parent_block_hash"`
		TokenIDs    []uint32 `json:"token_ids"`
		BlockSize   int      `json:"block_size"`
		Tier        string   `json:"tier"`
		Ownership   *string  `json:"ownership"`
		LoRAName    *string  `json:"lora_name"`
		CacheSalt   *string  `json:"cache_salt"`
		GroupIdx    int      `json:"group_idx"`
	}
	removedView struct {
		Type        string   `json:"type"`
		BlockHashes []uint64 `json:"block_hashes"`
		Tier        string   `json:"tier"`
		Ownership   *string  `json:"ownership"`
	}
	otherView struct { // cleared, or a kind the decoder skipped
		Type      string  `json:"type"`
		Ownership *string `json:"ownership"`
	}
)

// MarshalJSON implements json.Marshaler.
func (v BatchJSON) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := newJSONEncoder(&b).Encode(v.view()); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// newJSONEncoder writes engine strings as they are: a LoRA name holding
// "<" stays readable.
func newJSONEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

func (v BatchJSON) view() batchView {
	out := batchView{Events: make([]any, len(v.Batch.Events))}
	if v.Frame != nil {
		out.Topic, out.Seq = &v.Frame.Topic, &v.Frame.Seq
	}
	if ts := v.Batch.TS; !math.IsNaN(ts) && !math.IsInf(ts, 0) {
		out.TS = &ts
	}
	if v.Batch.HasDPRank {
		out.DPRank = &v.Batch.DPRank
	}
	for i := range v.Batch.Events {
		out.Events[i] = eventView(&v.Batch.Events[i])
	}
	return out
}

func eventView(ev *Event) any {
	var owner *string
	if ev.Ownership == OwnedByRunner {
		owner = new(string)
		*owner = OwnerKVCR
	}
	hashes := ev.BlockHashes
	if hashes == nil {
		hashes = []uint64{} // [], not null
	}
	switch ev.Kind {
	case KindStored:
		v := storedView{Type: ev.Kind.String(), BlockHashes: hashes, TokenIDs: ev.TokenIDs, BlockSize: ev.BlockSize,
			Tier: ev.Tier.String(), Ownership: owner, LoRAName: nonEmpty(ev.LoRAName), CacheSalt: nonEmpty(ev.CacheSalt),
			GroupIdx: ev.GroupIdx}
		if ev.HasParent {
			v.Parent = &ev.ParentHash
		}
		if v.TokenIDs == nil {
			v.TokenIDs = []uint32{}
		}
		return v
	case KindRemoved:
		return removedView{Type: ev.Kind.String(), BlockHashes: hashes, Tier: ev.Tier.String(), Ownership: owner}
	}
	return otherView{Type: ev.Kind.String(), Ownership: owner}
}

// nonEmpty is s, or nil (JSON null) for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// WriteJSON decodes every frame src yields and writes each batch to w as one
// line of BatchJSON; withFrame adds the frame's topic and seq. It stops at
// the first error, naming the frame, after flushing the lines before it.
func WriteJSON(w io.Writer, src Source, d *Decoder, withFrame bool) error {
	return writeJSON(w, src, d, withFrame, false)
}

// WriteJSONStream is WriteJSON for a live source: each line is flushed as
// soon as it is written, so that whoever reads w, or the file it is, has
// every batch decoded so far even if the process is killed.
func WriteJSONStream(w io.Writer, src Source, d *Decoder, withFrame bool) error {
	return writeJSON(w, src, d, withFrame, true)
}

func writeJSON(w io.Writer, src Source, d *Decoder, withFrame, flushEach bool) error {
	bw := bufio.NewWriter(w)
	enc := newJSONEncoder(bw)
	for {
		f, err := src.Next()
		if err == io.EOF {
			return bw.Flush()
		}
		if err != nil {
			bw.Flush()
			return err
		}
		b, err := d.Decode(f.Payload)
		if err != nil {
			bw.Flush()
			if withFrame {
				return fmt.Errorf("topic %q seq %d: %w", f.Topic, f.Seq, err)
			}
			return err
		}
		v := BatchJSON{Batch: b}
		if withFrame {
			v.Frame = &f
		}
		if err := enc.Encode(v.view()); err != nil { // one line each
			return err
		}
		if flushEach {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

// SinglePayload is a Source of one frame holding payload, for a message
// given without its topic and seq.
func SinglePayload(payload []byte) Source {
	return &single{f: Frame{Payload: payload}}
}

type single struct {
	f    Frame
	done bool
}

var _ Source = (*single)(nil)

func (s *single) Next() (Frame, error) {
	if s.done {
		return Frame{}, io.EOF
	}
	s.done = true
	return s.f, nil
}
