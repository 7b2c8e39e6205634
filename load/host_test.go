package load

import (
	"reflect"
	"testing"

	"github.com/kbundle/kbundle/bundle"
)

func TestDiffHost(t *testing.T) {
	for _, tc := range []struct {
		name            string
		recorded, local map[string]string
		want            []string
	}{
		{"same", map[string]string{bundle.MetaHostArch: "amd64", bundle.MetaCPUModel: "x"}, map[string]string{bundle.MetaHostArch: "amd64", bundle.MetaCPUModel: "x"}, nil},
		{"cpu differs", map[string]string{bundle.MetaCPUModel: "x", bundle.MetaCPUFlags: "a"}, map[string]string{bundle.MetaCPUModel: "y", bundle.MetaCPUFlags: "a"}, []string{`host.cpu_model: warmed on "x", here "y"`}},
		{"missing in recorded is no difference", map[string]string{}, map[string]string{bundle.MetaGPUModel: "A100"}, nil},
		{"gpu not visible here is unknown, not a difference", map[string]string{bundle.MetaGPUModel: "A100"}, map[string]string{}, nil},
		{"gpu differs", map[string]string{bundle.MetaGPUModel: "A100"}, map[string]string{bundle.MetaGPUModel: "H100"}, []string{`gpu.model: warmed on "A100", here "H100"`}},
		{"extra cpu flags here are no difference", map[string]string{bundle.MetaCPUFlags: "avx2 sse2"}, map[string]string{bundle.MetaCPUFlags: "avx2 avx512f sse2"}, nil},
		{"cpu flags missing here", map[string]string{bundle.MetaCPUFlags: "avx2 avx512f sse2"}, map[string]string{bundle.MetaCPUFlags: "avx2 sse2"}, []string{"host.cpu_flags: this node lacks avx512f"}},
		{"kernel not compared", map[string]string{bundle.MetaHostKernel: "5"}, map[string]string{bundle.MetaHostKernel: "6"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := diffHost(tc.recorded, tc.local); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diffHost = %v, want %v", got, tc.want)
			}
		})
	}
}
