package workerconfig

import "testing"

// SGLang picks an @path extra config's parser by os.path.splitext, so the
// agent must find the same extension to refuse what it cannot read.
func TestPathExtMatchesPythonSplitext(t *testing.T) {
	tests := []struct{ path, ext string }{
		{"/etc/kvcr/linker.json", ".json"},
		{"linker.JSON", ".JSON"},
		{"/etc/kvcr/linker.tar.gz", ".gz"},
		{"/etc/kvcr/.json", ""},
		{"/etc/kvcr/..json", ""},
		{"/etc/kv.cr/linker", ""},
		{"linker.", "."},
		{"linker.json ", ".json "},
		{"", ""},
	}
	for _, tt := range tests {
		if got := pathExt(tt.path); got != tt.ext {
			t.Errorf("pathExt(%q) = %q, want %q", tt.path, got, tt.ext)
		}
	}
}
