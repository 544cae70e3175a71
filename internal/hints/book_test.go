package hints

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestBook(t *testing.T) {
	a := func(keys ...uint64) Hint { return Hint{Endpoint: "tcp://a:1", BlockHashes: keys} }
	b := func(keys ...uint64) Hint { return Hint{Endpoint: "tcp://b:1", BlockHashes: keys} }
	type step struct {
		discard bool
		req     string
		hint    Hint
		err     error
	}
	tests := []struct {
		name  string
		steps []step
		// want: the book's hint per request afterwards; absent = none
		want map[string]Hint
		len  int
	}{
		{name: "one hint", steps: []step{{req: "r1", hint: a(1, 2)}},
			want: map[string]Hint{"r1": a(1, 2)}, len: 1},
		{name: "same source merges keys, first-seen order",
			steps: []step{{req: "r1", hint: a(3, 1)}, {req: "r1", hint: a(1, 2, 3, 4)}},
			want:  map[string]Hint{"r1": a(3, 1, 2, 4)}, len: 1},
		{name: "duplicates within one hint",
			steps: []step{{req: "r1", hint: a(5, 5, 6)}},
			want:  map[string]Hint{"r1": a(5, 6)}, len: 1},
		{name: "another source fails closed and drops the request's hint",
			steps: []step{{req: "r1", hint: a(1)}, {req: "r1", hint: b(2), err: ErrSourceConflict}},
			len:   1},
		{name: "and stays dropped, even for the first source",
			steps: []step{{req: "r1", hint: a(1)}, {req: "r1", hint: b(2), err: ErrSourceConflict},
				{req: "r1", hint: a(1), err: ErrSourceConflict}},
			len: 1},
		{name: "requests are independent",
			steps: []step{{req: "r1", hint: a(1)}, {req: "r2", hint: b(2)}, {req: "r2", hint: a(3), err: ErrSourceConflict}},
			want:  map[string]Hint{"r1": a(1)}, len: 2},
		{name: "discard forgets, including a conflict",
			steps: []step{{req: "r1", hint: a(1)}, {req: "r1", hint: b(2), err: ErrSourceConflict},
				{discard: true, req: "r1"}, {req: "r1", hint: b(2)}},
			want: map[string]Hint{"r1": b(2)}, len: 1},
		{name: "discard of an unknown request", steps: []step{{discard: true, req: "nope"}}},
		{name: "invalid hints are refused and leave no entry",
			steps: []step{{req: "r1", hint: Hint{BlockHashes: []uint64{1}}, err: ErrBadSource},
				{req: "r2", hint: Hint{Endpoint: "tcp://a:1"}, err: ErrBadBlockHashes}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var book Book
			for i, s := range tt.steps {
				if s.discard {
					book.Discard(s.req)
					continue
				}
				if err := book.Submit(s.req, s.hint); !errors.Is(err, s.err) {
					t.Fatalf("step %d: Submit(%s, %v) = %v, want %v", i, s.req, s.hint, err, s.err)
				}
			}
			if book.Len() != tt.len {
				t.Errorf("Len() = %d, want %d", book.Len(), tt.len)
			}
			for _, req := range []string{"r1", "r2", "nope"} {
				got, ok := book.Lookup(req)
				want, wantOK := tt.want[req]
				if ok != wantOK || wantOK && !reflect.DeepEqual(got, want) {
					t.Errorf("Lookup(%s) = %+v, %v; want %+v, %v", req, got, ok, want, wantOK)
				}
				for _, k := range []uint64{1, 2, 3, 4, 5, 6} {
					in := wantOK && slices.Contains(want.BlockHashes, k)
					if book.Has(req, k) != in {
						t.Errorf("Has(%s, %d) = %v, want %v", req, k, !in, in)
					}
				}
			}
		})
	}
}

// The book keeps its own copy: the caller's hint and what Lookup returns
// can be changed freely.
func TestBookCopies(t *testing.T) {
	var book Book
	h := Hint{Endpoint: "tcp://a:1", BlockHashes: []uint64{1, 2}}
	if err := book.Submit("r", h); err != nil {
		t.Fatal(err)
	}
	h.BlockHashes[0] = 9
	got, _ := book.Lookup("r")
	got.BlockHashes[1] = 9
	if again, _ := book.Lookup("r"); !reflect.DeepEqual(again.BlockHashes, []uint64{1, 2}) {
		t.Fatalf("book changed under us: %v", again.BlockHashes)
	}
}
