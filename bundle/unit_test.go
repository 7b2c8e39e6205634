package bundle

import (
	"strings"
	"testing"
)

func TestCacheUnit(t *testing.T) {
	h := strings.Repeat("C", 52)
	for name, want := range map[string]string{
		"numba/m/f-1.py312.nbi":           "numba/m/f-1.py312.nb*",
		"numba/m/f-1.py312.12.nbc":        "numba/m/f-1.py312.nb*",
		"triton/" + h + "/k.cubin":        "triton/" + h + "/",
		"inductor/triton/0/" + h + "/x.a": "inductor/triton/0/" + h + "/",
		"jax/abc":                         "jax/abc",
	} {
		if got := CacheUnit(name); got != want {
			t.Errorf("CacheUnit(%q) = %q, want %q", name, got, want)
		}
	}
}
