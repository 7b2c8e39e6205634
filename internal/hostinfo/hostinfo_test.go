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

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name            string
		recorded, local map[string]string
		want            []string
	}{
		{"same", map[string]string{archKey: "amd64", cpuModelKey: "x"}, map[string]string{archKey: "amd64", cpuModelKey: "x"}, nil},
		{"cpu differs", map[string]string{cpuModelKey: "x", cpuFlagsKey: "a"}, map[string]string{cpuModelKey: "y", cpuFlagsKey: "a"}, []string{`host.cpu_model: warmed on "x", here "y"`}},
		{"missing in recorded is no difference", map[string]string{}, map[string]string{gpuModelKey: "A100"}, nil},
		{"gpu not visible here is unknown, not a difference", map[string]string{gpuModelKey: "A100"}, map[string]string{}, nil},
		{"gpu differs", map[string]string{gpuModelKey: "A100"}, map[string]string{gpuModelKey: "H100"}, []string{`gpu.model: warmed on "A100", here "H100"`}},
		{"extra cpu flags here are no difference", map[string]string{cpuFlagsKey: "avx2 sse2"}, map[string]string{cpuFlagsKey: "avx2 avx512f sse2"}, nil},
		{"cpu flags missing here", map[string]string{cpuFlagsKey: "avx2 avx512f sse2"}, map[string]string{cpuFlagsKey: "avx2 sse2"}, []string{"host.cpu_flags: this node lacks avx512f"}},
		{"kernel not compared", map[string]string{kernelKey: "5"}, map[string]string{kernelKey: "6"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Diff(tc.recorded, tc.local); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Diff = %v, want %v", got, tc.want)
			}
		})
	}
}
