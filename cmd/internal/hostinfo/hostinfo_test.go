package hostinfo

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestCollectHasOSAndArch(t *testing.T) {
	m := Collect()
	if m[osKey] != runtime.GOOS || m[archKey] != runtime.GOARCH {
		t.Fatalf("Collect() = %v", m)
	}
}

func TestCPUInfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpuinfo")
	os.WriteFile(p, []byte("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: sse2 avx2 fpu\n\nprocessor\t: 1\nmodel name\t: Other\n"), 0o644)
	model, flags := cpuinfo(p)
	if model != "Test CPU 9000" || flags != "avx2 fpu sse2" {
		t.Fatalf("cpuinfo = %q, %q", model, flags)
	}
}
