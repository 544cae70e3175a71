// Package sysmem owns how much memory this machine gives the process: the
// smaller of the host's total (/proc/meminfo) and the cgroup's limit (v2
// memory.max, v1 memory.limit_in_bytes). Parsing is pure; Limit reads the
// files.
package sysmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// ErrUnknown: the machine's memory could not be read (not Linux, or /proc
// not mounted).
var ErrUnknown = errors.New("sysmem: machine memory unknown")

// ParseMemTotal returns MemTotal, in bytes, from /proc/meminfo's text.
func ParseMemTotal(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%w: MemTotal line %q", ErrUnknown, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 || kb > 1<<53 {
			return 0, fmt.Errorf("%w: MemTotal %q", ErrUnknown, f[0])
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%w: no MemTotal in meminfo", ErrUnknown)
}

// ParseCgroupLimit reads a cgroup memory limit file's text: a byte count,
// or "max" for none (ok false). cgroup v1 writes "no limit" as a huge
// count; the caller's min with the host total takes care of it.
func ParseCgroupLimit(text []byte) (limit int64, ok bool, err error) {
	s := strings.TrimSpace(string(text))
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("sysmem: cgroup memory limit %q", s)
	}
	return n, true, nil
}

// CgroupLimitFiles lists the files that may hold a memory limit on the
// process, from /proc/self/cgroup's text: those of its cgroup and of every
// ancestor, under /sys/fs/cgroup (v2 unified memory.max, v1 memory
// controller memory.limit_in_bytes), the mount's root last (inside a
// container with a cgroup namespace, the own cgroup). Each applies, so the
// limit is the smallest of them. Paths are relative to /.
func CgroupLimitFiles(selfCgroup []byte) []string {
	var out []string
	add := func(root, cg, file string) {
		for p := path.Clean(cg); ; p = path.Dir(p) {
			out = append(out, path.Join(root, p, file))
			if p == "/" {
				return
			}
		}
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(selfCgroup))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			add("sys/fs/cgroup", parts[2], "memory.max")
			seen["v2"] = true
		case hasController(parts[1], "memory"):
			add("sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
			seen["v1"] = true
		}
	}
	if !seen["v2"] {
		out = append(out, "sys/fs/cgroup/memory.max")
	}
	if !seen["v1"] {
		out = append(out, "sys/fs/cgroup/memory/memory.limit_in_bytes")
	}
	return out
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// Available is the memory the process may use: the host total, or the
// cgroup limit when that is smaller (cgroup 0 means none).
func Available(hostTotal, cgroup int64) int64 {
	if cgroup > 0 && cgroup < hostTotal {
		return cgroup
	}
	return hostTotal
}

// LimitFS is Limit reading the files from fsys, rooted at /.
func LimitFS(fsys fs.FS) (int64, error) {
	mi, err := fs.ReadFile(fsys, "proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	total, err := ParseMemTotal(mi)
	if err != nil {
		return 0, err
	}
	self, _ := fs.ReadFile(fsys, "proc/self/cgroup") // none: no cgroup to honour
	avail := total
	for _, p := range CgroupLimitFiles(self) {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			continue // not mounted there, or not this cgroup version
		}
		if limit, ok, err := ParseCgroupLimit(b); err == nil && ok {
			avail = Available(avail, limit)
		}
	}
	return avail, nil
}

// Limit is the memory the process may use on this machine: the smaller of
// /proc/meminfo's MemTotal and its cgroup's memory limit.
func Limit() (int64, error) { return LimitFS(os.DirFS("/")) }
