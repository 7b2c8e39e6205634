package bundle

import (
	"strings"
	"testing"
)

func TestCacheUnit(t *testing.T) {
	h := strings.Repeat("C", 52)
	for name, want := range map[string]string{
		"numba/m/f-1.py312.nbi":                                         "numba/m/f-1.py312.nb*",
		"numba/m/f-1.py312.12.nbc":                                      "numba/m/f-1.py312.nb*",
		"triton/" + h + "/k.cubin":                                      "triton/" + h + "/",
		"inductor/triton/0/" + h + "/x.a":                               "inductor/triton/0/" + h + "/",
		"jax/abc":                                                       "jax/abc",
		"torch_extensions/kb_op/build.ninja":                            "torch_extensions/kb_op/",
		"torch_extensions/kb_op/.ninja_log":                             "torch_extensions/kb_op/",
		"torch_extensions/kb_op/kb_op.so":                               "torch_extensions/kb_op/",
		"torch_extensions/stray":                                        "torch_extensions/stray",
		"flashinfer/.cache/flashinfer/0.2.5/90/cached_ops/norm/norm.so": "flashinfer/.cache/flashinfer/0.2.5/90/cached_ops/norm/",
	} {
		if got := CacheUnit(name); got != want {
			t.Errorf("CacheUnit(%q) = %q, want %q", name, got, want)
		}
		if triton := strings.Contains(name, "triton/"); TritonUnit(want) != triton {
			t.Errorf("TritonUnit(%q) = %v, want %v", want, !triton, triton)
		}
	}
}
