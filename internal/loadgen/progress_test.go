package loadgen

import (
	"bytes"
	"testing"
	"time"
)

func TestProgress(t *testing.T) {
	type step struct {
		after time.Duration
		done  int
	}
	tests := []struct {
		name  string
		total int
		tty   bool
		steps []step
		want  string
	}{{
		name:  "not a terminal: silent",
		total: 4,
		steps: []step{{time.Second, 1}, {time.Second, 4}},
		want:  "",
	}, {
		name:  "rate, ETA, and a newline at the end",
		total: 10,
		tty:   true,
		steps: []step{{2 * time.Second, 1}, {2 * time.Second, 5}, {time.Second, 10}},
		want: "\r[>                             ]  0/10  -- req/s  ETA --" +
			"\r[===>                          ]  1/10  0.5 req/s  ETA 18s" +
			"\r[===============>              ]  5/10  1.2 req/s  ETA 4s " +
			"\r[==============================] 10/10  2.0 req/s  in 5s \n",
	}, {
		name:  "a shorter line blanks the tail of a longer one; nothing after the end",
		total: 2,
		tty:   true,
		steps: []step{{time.Hour, 1}, {time.Millisecond, 2}, {time.Second, 2}},
		want: "\r[>                             ] 0/2  -- req/s  ETA --" +
			"\r[===============>              ] 1/2  0.0 req/s  ETA 1h0m0s" +
			"\r[==============================] 2/2  0.0 req/s  in 1h0m0s \n",
	}, {
		name:  "an empty workload is done at once",
		total: 0,
		tty:   true,
		want:  "\r[==============================] 0/0  -- req/s  in 0s\n",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			clock := newVirtualClock()
			update := Progress(&buf, tt.total, tt.tty, clock)
			for _, s := range tt.steps {
				clock.advance(s.after)
				update(s.done, tt.total)
			}
			if got := buf.String(); got != tt.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
