package ingest

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A data-driven test file is a sequence of cases, in etcd/raft's style:
//
//	# a comment, between cases
//	command key=value flag ...
//	input line
//	...
//	----
//	expected output line
//	...
//
// A case ends at a blank line or the end of the file; its expected output
// cannot hold blank lines. Comments belong to the case after them. The input lines and the "----" line are
// optional when there is no input. Cases of a file run in order against
// one state. With -rewrite, the files are written back with the output
// each case gave.

var rewrite = flag.Bool("rewrite", false, "write the data-driven test files back with the output each case gave")

// ddCase is one case of a data-driven file.
type ddCase struct {
	comments []string // the comment lines before it
	pos      string   // file:line of the command
	cmd      string
	args     []ddArg
	input    []string
	want     string
}

// ddArg is a "key=value" or a bare "key" word of a command line.
type ddArg struct{ key, val string }

func parseDD(t *testing.T, path string) []ddCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var cases []ddCase
	var comments []string
	for i := 0; i < len(lines); {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			if line != "" {
				comments = append(comments, line)
			}
			i++
			continue
		}
		c := ddCase{comments: comments, pos: fmt.Sprintf("%s:%d", path, i+1)}
		comments = nil
		words := strings.Fields(line)
		c.cmd = words[0]
		for _, w := range words[1:] {
			k, v, _ := strings.Cut(w, "=")
			c.args = append(c.args, ddArg{k, v})
		}
		i++
		for ; i < len(lines) && lines[i] != "----" && strings.TrimSpace(lines[i]) != ""; i++ {
			c.input = append(c.input, strings.TrimSpace(lines[i]))
		}
		if i < len(lines) && lines[i] == "----" {
			i++
			var out []string
			for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
				out = append(out, lines[i])
			}
			c.want = strings.Join(out, "\n")
		}
		cases = append(cases, c)
	}
	return cases
}

// runDD runs every case of the file at path through do, which returns the
// case's output, and compares it with the expected output.
func runDD(t *testing.T, path string, do func(c *ddCase) string) {
	t.Helper()
	cases := parseDD(t, path)
	var out strings.Builder
	for i := range cases {
		c := &cases[i]
		got := strings.TrimRight(do(c), "\n")
		if *rewrite {
			writeCase(&out, c, got)
			continue
		}
		if got != c.want {
			t.Fatalf("%s: %s\ngot:\n%s\nwant:\n%s", c.pos, c.cmd, got, c.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeCase renders a case back, comments and all, with output got.
func writeCase(b *strings.Builder, c *ddCase, got string) {
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	for _, cm := range c.comments {
		b.WriteString(cm + "\n")
	}
	b.WriteString(c.cmd)
	for _, a := range c.args {
		b.WriteString(" " + a.key)
		if a.val != "" {
			b.WriteString("=" + a.val)
		}
	}
	b.WriteString("\n")
	for _, l := range c.input {
		b.WriteString(l + "\n")
	}
	b.WriteString("----\n")
	if got != "" {
		b.WriteString(got + "\n")
	}
}

// has reports whether the command line names key.
func (c *ddCase) has(key string) bool {
	for _, a := range c.args {
		if a.key == key {
			return true
		}
	}
	return false
}

// str returns key's value, or def when the command line does not name it.
func (c *ddCase) str(key, def string) string {
	for _, a := range c.args {
		if a.key == key {
			return a.val
		}
	}
	return def
}

// int returns key's value as an integer, or def.
func (c *ddCase) int(t *testing.T, key string, def int) int {
	t.Helper()
	v := c.str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", c.pos, key, v, err)
	}
	return n
}
