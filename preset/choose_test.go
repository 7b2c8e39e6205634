package preset

import (
	"errors"
	"testing"

	"github.com/kbundle/kbundle/bundle"
)

// TestChoose: the one rule of load and extract: --preset adds to the
// recorded presets; --replace-presets applies only those named (none
// when none is named); an unknown recorded preset (a newer kbundle's) is
// an error unless replaced.
func TestChoose(t *testing.T) {
	numba, _ := Lookup("numba")
	triton, _ := Lookup("triton")
	for _, tc := range []struct {
		name    string
		named   []*Preset
		replace bool
		meta    map[string]string
		want    string // preset names, or "error"
	}{
		{"recorded", nil, false, map[string]string{bundle.MetaPreset: "triton,jax"}, "triton,jax"},
		{"none recorded", nil, false, map[string]string{}, ""},
		{"named adds to recorded", []*Preset{numba}, false, map[string]string{bundle.MetaPreset: "triton"}, "triton,numba"},
		{"named already recorded", []*Preset{triton}, false, map[string]string{bundle.MetaPreset: "triton"}, "triton"},
		{"named replaces recorded", []*Preset{numba}, true, map[string]string{bundle.MetaPreset: "triton"}, "numba"},
		{"replace with none applies none", nil, true, map[string]string{bundle.MetaPreset: "triton"}, ""},
		{"recorded unknown", nil, false, map[string]string{bundle.MetaPreset: "triton,kbundle-future"}, "error"},
		{"named added to an unknown recorded", []*Preset{numba}, false, map[string]string{bundle.MetaPreset: "kbundle-future"}, "error"},
		{"named replaces an unknown recorded", []*Preset{numba}, true, map[string]string{bundle.MetaPreset: "kbundle-future"}, "numba"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(tc.named, tc.replace, tc.meta)
			if tc.want == "error" {
				if !errors.Is(err, ErrUnknownPreset) {
					t.Fatalf("error %v, want ErrUnknownPreset", err)
				}
				return
			}
			if err != nil || Names(got) != tc.want {
				t.Fatalf("Choose = %q, %v; want %q", Names(got), err, tc.want)
			}
		})
	}
}
