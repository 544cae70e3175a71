package zmtp

import (
	"fmt"
	"slices"
	"testing"
)

func TestSmokePubSub(t *testing.T) {
	checkLeaks(t)
	pub := newSocket(t, Pub, Options{})
	ep := listen(t, pub)
	sub := newSocket(t, Sub, Options{})
	sub.Subscribe("kv")
	if err := sub.Connect(ep); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscription", func() bool {
		ps := *pub.peers.Load()
		return len(ps) == 1 && ps[0].subs.match([]byte("kv"))
	})
	send(t, pub, "zz", "no")
	send(t, pub, "kv1", "a", "b")
	if got := frameStrings(recv(t, sub)); !slices.Equal(got, []string{"kv1", "a", "b"}) {
		t.Fatalf("got %q", got)
	}
	r := newSocket(t, Router, Options{})
	rep := listen(t, r)
	d := newSocket(t, Dealer, Options{})
	if err := d.Connect(rep); err != nil {
		t.Fatal(err)
	}
	send(t, d, "", "hello")
	m := recv(t, r)
	fmt.Println(m.Frames)
	send(t, r, string(m.Frames[0]), "", "world")
	if got := frameStrings(recv(t, d)); !slices.Equal(got, []string{"", "world"}) {
		t.Fatalf("got %q", got)
	}
}
