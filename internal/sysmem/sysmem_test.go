package sysmem

import (
	"errors"
	"slices"
	"testing"
	"testing/fstest"
)

const meminfo = "MemTotal:       24683652 kB\nMemFree:        19738480 kB\n"

func TestParseMemTotal(t *testing.T) {
	got, err := ParseMemTotal([]byte(meminfo))
	if err != nil || got != 24683652<<10 {
		t.Fatalf("ParseMemTotal = %d, %v", got, err)
	}
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemTotal: x kB\n", "MemTotal: 12 MB\n", "MemTotal: -1 kB\n"} {
		if _, err := ParseMemTotal([]byte(bad)); !errors.Is(err, ErrUnknown) {
			t.Errorf("ParseMemTotal(%q): %v, want ErrUnknown", bad, err)
		}
	}
}

func TestParseCgroupLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		ok, err bool
	}{
		{"max\n", 0, false, false},
		{"2147483648\n", 2 << 30, true, false},
		{"9223372036854771712\n", 9223372036854771712, true, false},
		{"lots", 0, false, true},
		{"0", 0, false, true},
	}
	for _, tt := range tests {
		got, ok, err := ParseCgroupLimit([]byte(tt.in))
		if got != tt.want || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("ParseCgroupLimit(%q) = %d, %v, %v", tt.in, got, ok, err)
		}
	}
}

func TestCgroupLimitFiles(t *testing.T) {
	tests := []struct {
		name, self string
		want       []string
	}{
		{"v2", "0::/kubepods/pod1/c1\n", []string{
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max", "sys/fs/cgroup/kubepods/pod1/memory.max",
			"sys/fs/cgroup/kubepods/memory.max", "sys/fs/cgroup/memory.max",
			"sys/fs/cgroup/memory/memory.limit_in_bytes",
		}},
		{"v1", "9:name=systemd:/\n4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n", []string{
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "sys/fs/cgroup/memory/docker/memory.limit_in_bytes",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory.max",
		}},
		{"namespaced v2", "0::/\n", []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"}},
		{"unreadable", "", []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"}},
	}
	for _, tt := range tests {
		if got := CgroupLimitFiles([]byte(tt.self)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: CgroupLimitFiles = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestLimitFS(t *testing.T) {
	host := int64(24683652) << 10
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"no cgroup", fstest.MapFS{"proc/meminfo": file(meminfo)}, host},
		{"v2 limit", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/app\n"),
			"sys/fs/cgroup/app/memory.max": file("4294967296\n"),
		}, 4 << 30},
		{"v2 unlimited, parent limited", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/memory.max": file("max\n"), "sys/fs/cgroup/a/memory.max": file("1073741824\n"),
		}, 1 << 30},
		{"v1 no limit", fstest.MapFS{
			"proc/meminfo": file(meminfo), "proc/self/cgroup": file("4:memory:/x\n"),
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, host},
		{"limit above host", fstest.MapFS{
			"proc/meminfo": file(meminfo), "sys/fs/cgroup/memory.max": file("1099511627776\n"),
		}, host},
	}
	for _, tt := range tests {
		if got, err := LimitFS(tt.fs); err != nil || got != tt.want {
			t.Errorf("%s: LimitFS = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	if _, err := LimitFS(fstest.MapFS{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("without /proc/meminfo: %v, want ErrUnknown", err)
	}
}
