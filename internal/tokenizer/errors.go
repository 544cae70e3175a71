// This file holds the errors of tokenizer files: unsupported features and invalid fields.

package tokenizer

import (
	"errors"
	"fmt"
)

var (
	// ErrUnsupported marks a tokenizer.json feature that this package does
	// not implement; the error names the field.
	ErrUnsupported = errors.New("unsupported tokenizer feature")
	// ErrInvalid marks a malformed tokenizer.json; the error names the
	// field.
	ErrInvalid = errors.New("invalid tokenizer")
)

func unsupported(field, format string, args ...any) error {
	return fmt.Errorf("tokenizer: %s: %s: %w", field, fmt.Sprintf(format, args...), ErrUnsupported)
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("tokenizer: %s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalid)
}
