// This file holds the reading of decoded JSON objects: typed values named by their option path.

package workerconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// maxCount bounds sizes and ranks read from a configuration. Real fleets are
// far below it; the bound keeps a hostile or mistyped value from making the
// descriptor enormous.
const maxCount = 4096

// object is one decoded JSON object plus the option path used to name its
// keys in errors, so messages speak the operator's own words.
type object struct {
	path string
	m    map[string]any
}

// decodeObject decodes exactly one JSON object. Numbers stay json.Number so
// integers are never silently rounded.
func decodeObject(data []byte, path string) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return object{}, configErr(nil, path, "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return object{}, configErr(nil, path, "malformed JSON: trailing data after the object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return object{}, configErr(nil, path, "must be a JSON object, got %s", kindOf(v))
	}
	return object{path: path, m: m}, nil
}

// nested reads a value that is either a JSON object or JSON text of one
// (engines pass both: server info returns text, a YAML launcher a mapping).
// Absent, null and blank text are reported as not present.
func (o object) nested(key string) (object, bool, error) {
	name := o.name(key)
	switch v := o.m[key].(type) {
	case nil:
		return object{}, false, nil
	case map[string]any:
		return object{path: name, m: v}, true, nil
	case string:
		if strings.TrimSpace(v) == "" {
			return object{}, false, nil
		}
		obj, err := decodeObject([]byte(v), name)
		return obj, err == nil, err
	default:
		return object{}, false, configErr(nil, name, "must be a JSON object or JSON text of one, got %s", kindOf(v))
	}
}

func (o object) name(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// present reports a key that is set to something other than null.
func (o object) present(key string) bool { return o.m[key] != nil }

// has reports a key that is set, even to null.
func (o object) has(key string) bool {
	_, ok := o.m[key]
	return ok
}

func (o object) str(key string) (string, bool, error) {
	switch v := o.m[key].(type) {
	case nil:
		return "", false, nil
	case string:
		return v, true, nil
	default:
		return "", false, configErr(nil, o.name(key), "must be a string, got %s", kindOf(v))
	}
}

func (o object) boolean(key string, def bool) (bool, error) {
	switch v := o.m[key].(type) {
	case nil:
		return def, nil
	case bool:
		return v, nil
	default:
		return false, configErr(nil, o.name(key), "must be true or false, got %s", kindOf(v))
	}
}

// count reads a positive size such as tp_size; absent or null gives def.
func (o object) count(key string, def int) (int, error) {
	v, ok, err := o.integer(key)
	if err != nil || !ok {
		return def, err
	}
	if v < 1 || v > maxCount {
		return 0, configErr(nil, o.name(key), "must be between 1 and %d, got %d", maxCount, v)
	}
	return int(v), nil
}

// rank reads a non-negative rank; ok is false when absent or null.
func (o object) rank(key string) (int, bool, error) {
	v, ok, err := o.integer(key)
	if err != nil || !ok {
		return 0, false, err
	}
	if v < 0 || v >= maxCount {
		return 0, false, configErr(nil, o.name(key), "must be between 0 and %d, got %d", maxCount-1, v)
	}
	return int(v), true, nil
}

// positive reads a positive integer such as a byte budget or a timeout.
func (o object) positive(key string) (int64, bool, error) {
	v, ok, err := o.integer(key)
	if err != nil || !ok {
		return 0, false, err
	}
	if v < 1 {
		return 0, false, configErr(nil, o.name(key), "must be a positive integer, got %d", v)
	}
	return v, true, nil
}

func (o object) integer(key string) (int64, bool, error) {
	switch v := o.m[key].(type) {
	case nil:
		return 0, false, nil
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, false, configErr(nil, o.name(key), "must be an integer, got %s", v)
		}
		return n, true, nil
	default:
		return 0, false, configErr(nil, o.name(key), "must be an integer, got %s", kindOf(v))
	}
}

// port reads a TCP port given as a number or decimal text. A bool is
// rejected by name: Python would read true as port 1.
func portValue(v any, name string) (int, error) {
	var text string
	switch v := v.(type) {
	case bool:
		return 0, configErr(ErrInvalidPort, name, "a bool is not a port; set a number in 1..65535")
	case json.Number:
		text = string(v)
	case string:
		text = strings.TrimSpace(v)
	default:
		return 0, configErr(ErrInvalidPort, name, "must be a port number in 1..65535, got %s", kindOf(v))
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, configErr(ErrInvalidPort, name, "must be a port number in 1..65535, got %q", text)
	}
	if n < 1 || n > 65535 {
		return 0, configErr(ErrInvalidPort, name, "must be in 1..65535, got %d", n)
	}
	return int(n), nil
}

func kindOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a bool (" + strconv.FormatBool(v) + ")"
	case json.Number:
		return "a number (" + string(v) + ")"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return "an unexpected value"
}
