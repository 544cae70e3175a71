// This file holds the configuration errors: sentinels, and ConfigError naming the option to fix.

package workerconfig

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every hard configuration error matches ErrInvalidConfig
// and, where one applies, a narrower category.
var (
	// ErrInvalidConfig: the configuration cannot be served as written.
	ErrInvalidConfig = errors.New("invalid worker configuration")
	// ErrUndialableHost: a host peers must dial is missing, a wildcard,
	// unspecified, loopback or malformed.
	ErrUndialableHost = errors.New("undialable host")
	// ErrInvalidPort: a port is missing, not an integer, out of 1..65535, or
	// collides with another port of the worker.
	ErrInvalidPort = errors.New("invalid port")
	// ErrUnsupportedOption: an option the selected mode or engine rejects.
	ErrUnsupportedOption = errors.New("unsupported option")
	// ErrInventoryGuarantee: runner inventory would not be process-local or
	// would not be published.
	ErrInventoryGuarantee = errors.New("runner inventory guarantee missing")
	// ErrInvalidOwnerID: a cache owner id is malformed, repeated or does not
	// match the DP ranks.
	ErrInvalidOwnerID = errors.New("invalid cache owner id")
	// ErrBlockSizeMismatch: events would use another block size than the
	// worker's KV block size.
	ErrBlockSizeMismatch = errors.New("event block size mismatch")
	// ErrNoEvents: hints need KV events but the engine publishes none.
	ErrNoEvents = errors.New("kv events disabled")
	// ErrInvalidDescriptor: a descriptor breaks its own invariants.
	ErrInvalidDescriptor = errors.New("invalid descriptor")
)

// ConfigError is a hard configuration error tied to the option to fix.
type ConfigError struct {
	Option string // as the operator writes it, e.g. "hicache_storage_backend_extra_config.advertise_host"
	Kind   error  // a sentinel category, or nil
	Msg    string
	Err    error // underlying cause, if any
}

func (e *ConfigError) Error() string {
	if e.Option == "" {
		return e.Msg
	}
	return e.Option + ": " + e.Msg
}

// Unwrap lets errors.Is match both the category and ErrInvalidConfig.
func (e *ConfigError) Unwrap() []error {
	errs := []error{ErrInvalidConfig}
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

func configErr(kind error, option, format string, args ...any) error {
	return &ConfigError{Option: option, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func descriptorErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidDescriptor}, args...)...)
}
