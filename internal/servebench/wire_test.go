package servebench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWireClient: the load generator reads net/http's answers whichever
// way they frame the body, and reconnects when the server closes.
func TestWireClient(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		switch string(b) {
		case "chunked":
			w.Write([]byte("part one "))
			w.(http.Flusher).Flush()
			w.Write([]byte("part two"))
		case "close":
			w.Header().Set("Connection", "close")
			w.Write([]byte("bye"))
		case "teapot":
			w.WriteHeader(http.StatusTeapot)
		default:
			w.Write([]byte(`{"ok":true}`))
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &wireConn{addr: addr}
	defer c.close()
	for _, tc := range []struct {
		body   string
		status int
	}{{"plain", 200}, {"chunked", 200}, {"close", 200}, {"plain", 200}, {"teapot", 418}, {"", 200}} {
		status, err := c.post(wireRequest(addr, "/v1/completions", []byte(tc.body)))
		if err != nil || status != tc.status {
			t.Fatalf("%q: status %d, %v; want %d", tc.body, status, err, tc.status)
		}
	}
	if len(got) != 6 || got[1] != "POST /v1/completions chunked" {
		t.Fatalf("server saw %q", got)
	}
}

// TestNullEngine: net/http's client gets the null completion, on one
// connection, with the body sent plainly or chunked.
func TestNullEngine(t *testing.T) {
	e, err := startNullEngine()
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	c := &http.Client{}
	for i, body := range []io.Reader{strings.NewReader(`{"prompt":[1,2]}`), io.MultiReader(strings.NewReader("a"), strings.NewReader("b")), nil} {
		resp, err := c.Post(e.url+"/v1/completions", "application/json", body)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(b, nullCompletion) {
			t.Fatalf("request %d: %s %q", i, resp.Status, b)
		}
	}
	if n := e.hits.Load(); n != 3 {
		t.Fatalf("hits = %d, want 3", n)
	}
}
