package hostinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

func TestCollectHasOSAndArch(t *testing.T) {
	m := Collect()
	if m[OS] != runtime.GOOS || m[Arch] != runtime.GOARCH {
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

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name            string
		recorded, local map[string]string
		want            []string
	}{
		{"same", map[string]string{Arch: "amd64", CPUModel: "x"}, map[string]string{Arch: "amd64", CPUModel: "x"}, nil},
		{"cpu differs", map[string]string{CPUModel: "x", CPUFlags: "a"}, map[string]string{CPUModel: "y", CPUFlags: "a"}, []string{CPUModel}},
		{"missing in recorded is no difference", map[string]string{}, map[string]string{GPUModel: "A100"}, nil},
		{"gpu gone", map[string]string{GPUModel: "A100"}, map[string]string{}, []string{GPUModel}},
		{"kernel not compared", map[string]string{Kernel: "5"}, map[string]string{Kernel: "6"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Diff(tc.recorded, tc.local); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Diff = %v, want %v", got, tc.want)
			}
		})
	}
}
