package kvstream

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		b       Backoff
		attempt int
		want    time.Duration
	}{
		{Backoff{Min: 10 * ms, Max: 100 * ms}, 0, 10 * ms},
		{Backoff{Min: 10 * ms, Max: 100 * ms}, 1, 20 * ms},
		{Backoff{Min: 10 * ms, Max: 100 * ms}, 3, 80 * ms},
		{Backoff{Min: 10 * ms, Max: 100 * ms}, 4, 100 * ms},
		{Backoff{Min: 10 * ms, Max: 100 * ms}, 1000, 100 * ms},
		{Backoff{}, 0, DefaultBackoffMin},
		{Backoff{}, 1000, DefaultBackoffMax},
		{Backoff{Min: 50 * ms, Max: 10 * ms}, 5, 50 * ms},
	}
	for _, tc := range tests {
		if got := tc.b.Delay(tc.attempt); got != tc.want {
			t.Errorf("%+v.Delay(%d) = %v, want %v", tc.b, tc.attempt, got, tc.want)
		}
	}
}
