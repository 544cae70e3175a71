// Command gendemo writes the kvrouter-demo tokenizer.json that the
// tokenizer package embeds; run it through `go generate` in
// internal/tokenizer.
package main

import (
	"flag"
	"fmt"
	"os"

	"kvrouter/internal/tokenizer/internal/train"
)

func main() {
	out := flag.String("o", "kvrouter-demo.json", "output `file`")
	flag.Parse()
	if err := os.WriteFile(*out, train.DemoJSON(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendemo:", err)
		os.Exit(1)
	}
}
