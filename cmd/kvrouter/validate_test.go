package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvrouter/internal/workerconfig"
)

var updateValidate = flag.Bool("update-validate", false, "rewrite the validate golden files")

const validateTestdata = "../../internal/workerconfig/testdata/cli"

func TestValidateCommand(t *testing.T) {
	// Files resolve relative to the testdata directory, as @path would
	// resolve relative to the engine's working directory.
	readFile := func(path string) ([]byte, error) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(validateTestdata, path)
		}
		return os.ReadFile(path)
	}
	resolve := func(host string) ([]string, error) {
		if host == "localhost" {
			return []string{"127.0.0.1"}, nil
		}
		return nil, errors.New("no such host")
	}
	tests := []struct {
		name    string
		args    []string
		golden  string   // expected stdout, for success
		wantErr []string // substrings of the error, for failure
		wantIs  error
	}{
		{name: "sglang linker", args: []string{"--engine", "sglang", "--config", "sglang_linker_tp1.json"}, golden: "sglang_linker_tp1.golden"},
		{name: "sglang attention DP from rank 4", args: []string{"--engine", "sglang", "--config", "sglang_dp_attention.json", "--dp-start", "4"}, golden: "sglang_dp_attention_start4.golden"},
		{name: "refused topology exits 0", args: []string{"--engine", "sglang", "--config", "sglang_pp2.json"}, golden: "sglang_pp2.golden"},
		{name: "extra config from a file, events advertised", args: []string{"--engine", "sglang", "--config", "sglang_extra_file.json", "--advertise-host", "10.1.1.1"}, golden: "sglang_extra_file.golden"},
		{name: "vllm two ranks", args: []string{"--engine", "vllm", "--config", "vllm_dp2.json"}, golden: "vllm_dp2.golden"},
		{name: "loopback host", args: []string{"--engine", "sglang", "--config", "sglang_loopback.json"},
			wantErr: []string{"sglang_loopback.json", "advertise_host", "loopback", "--hicache-storage-backend-extra-config"}, wantIs: workerconfig.ErrUndialableHost},
		{name: "loopback host on a single host", args: []string{"--engine", "sglang", "--config", "sglang_loopback.json", "--single-host"}, golden: "sglang_loopback_single_host.golden"},
		{name: "unknown engine", args: []string{"--engine", "trtllm", "--config", "sglang_pp2.json"}, wantErr: []string{"--engine", "trtllm"}, wantIs: workerconfig.ErrInvalidConfig},
		{name: "missing file", args: []string{"--engine", "vllm", "--config", "nope.json"}, wantErr: []string{"--config", "nope.json"}, wantIs: os.ErrNotExist},
		{name: "flags required", args: []string{"--engine", "vllm"}, wantErr: []string{"config"}},
		{name: "bad advertise host", args: []string{"--engine", "vllm", "--config", "vllm_dp2.json", "--advertise-host", "*"}, wantErr: []string{"--advertise-host"}, wantIs: workerconfig.ErrUndialableHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := validateCmd(readFile, resolve)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			if tt.golden == "" {
				if err == nil {
					t.Fatalf("want an error, got output\n%s", out.String())
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("error %q does not match %v", err, tt.wantIs)
				}
				if out.Len() != 0 {
					t.Errorf("a failed validation printed to stdout:\n%s", out.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(validateTestdata, tt.golden)
			if *updateValidate {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("output differs from %s:\n%s", tt.golden, out.String())
			}
		})
	}
}

func TestValidateHelp(t *testing.T) {
	cmd := validateCmd(os.ReadFile, nil)
	for _, name := range []string{"engine", "config", "dp-start", "advertise-host"} {
		f := cmd.Flags().Lookup(name)
		if f == nil || len(f.Usage) < 20 {
			t.Errorf("flag --%s lacks a usage text", name)
		}
	}
	for _, s := range []string{"hint_capable", "refusal", "exits 1", "router_hint_source_control_endpoints"} {
		if !strings.Contains(cmd.Long, s) {
			t.Errorf("help does not explain %q", s)
		}
	}
}
