package kvevents

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
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

// MarshalJSON implements json.Marshaler.
func (v BatchJSON) MarshalJSON() ([]byte, error) {
	return v.AppendJSON(nil), nil
}

// AppendJSON appends the object, without a newline.
func (v BatchJSON) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	if v.Frame != nil {
		b = appendJSONKey(b, 0, jsonTopic)
		b = appendJSONString(b, v.Frame.Topic)
		b = appendJSONKey(b, ',', jsonSeq)
		b = strconv.AppendUint(b, v.Frame.Seq, 10)
		b = append(b, ',')
	}
	b = appendJSONKey(b, 0, jsonTS)
	b = appendJSONFloat(b, v.Batch.TS)
	b = appendJSONKey(b, ',', jsonDPRank)
	if v.Batch.HasDPRank {
		b = strconv.AppendInt(b, int64(v.Batch.DPRank), 10)
	} else {
		b = append(b, "null"...)
	}
	b = appendJSONKey(b, ',', jsonEvents)
	b = append(b, '[')
	for i := range v.Batch.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEventJSON(b, &v.Batch.Events[i])
	}
	return append(b, "]}"...)
}

func appendEventJSON(b []byte, ev *Event) []byte {
	b = append(b, '{')
	b = appendJSONKey(b, 0, jsonType)
	b = appendJSONString(b, ev.Kind.String())
	if ev.Kind == KindStored || ev.Kind == KindRemoved {
		b = appendJSONKey(b, ',', jsonBlockHashes)
		b = append(b, '[')
		for i, h := range ev.BlockHashes {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, h, 10)
		}
		b = append(b, ']')
	}
	if ev.Kind == KindStored {
		b = appendJSONKey(b, ',', jsonParent)
		if ev.HasParent {
			b = strconv.AppendUint(b, ev.ParentHash, 10)
		} else {
			b = append(b, "null"...)
		}
		b = appendJSONKey(b, ',', jsonTokenIDs)
		b = append(b, '[')
		for i, t := range ev.TokenIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(t), 10)
		}
		b = append(b, ']')
		b = appendJSONKey(b, ',', jsonBlockSize)
		b = strconv.AppendInt(b, int64(ev.BlockSize), 10)
	}
	if ev.Kind == KindStored || ev.Kind == KindRemoved {
		b = appendJSONKey(b, ',', jsonTier)
		b = appendJSONString(b, ev.Tier.String())
	}
	b = appendJSONKey(b, ',', jsonOwnership)
	if ev.Ownership == OwnedByRunner {
		b = appendJSONString(b, ownerRunner)
	} else {
		b = append(b, "null"...)
	}
	if ev.Kind == KindStored {
		b = appendJSONKey(b, ',', jsonLoRAName)
		b = appendJSONNullString(b, ev.LoRAName)
		b = appendJSONKey(b, ',', jsonCacheSalt)
		b = appendJSONNullString(b, ev.CacheSalt)
		b = appendJSONKey(b, ',', jsonGroupIdx)
		b = strconv.AppendInt(b, int64(ev.GroupIdx), 10)
	}
	return append(b, '}')
}

// appendJSONKey writes sep (0 for none) and the quoted key with its colon;
// keys are our ASCII constants and need no escaping.
func appendJSONKey(b []byte, sep byte, key string) []byte {
	if sep != 0 {
		b = append(b, sep)
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendJSONFloat formats like encoding/json; JSON has no NaN or infinity,
// so those become null.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.AppendFloat(b, f, 'e', -1, 64)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

func appendJSONNullString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}

// appendJSONString quotes s; invalid UTF-8 becomes U+FFFD as in
// encoding/json, since engine strings are only as valid as the engine.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// WriteJSON decodes every frame src yields and writes each batch to w as one
// line of BatchJSON; withFrame adds the frame's topic and seq. It stops at
// the first error, naming the frame, after flushing the lines before it.
func WriteJSON(w io.Writer, src Source, d *Decoder, withFrame bool) error {
	bw := bufio.NewWriter(w)
	var line []byte
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
		line = append(v.AppendJSON(line[:0]), '\n')
		if _, err := bw.Write(line); err != nil {
			return err
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

func (s *single) Next() (Frame, error) {
	if s.done {
		return Frame{}, io.EOF
	}
	s.done = true
	return s.f, nil
}
