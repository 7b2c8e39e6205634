package hostinfo_test

import (
	"slices"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostinfo"
)

// TestKeysAreTheFormats: the keys Collect writes are exactly the public
// ones of package bundle (docs/FORMAT.md), in the same order.
func TestKeysAreTheFormats(t *testing.T) {
	want := []string{bundle.MetaHostOS, bundle.MetaHostArch, bundle.MetaHostKernel, bundle.MetaCPUModel,
		bundle.MetaCPUFlags, bundle.MetaGPUModel, bundle.MetaGPUCompute, bundle.MetaGPUDriver}
	if !slices.Equal(hostinfo.Keys, want) {
		t.Fatalf("hostinfo keys %q, bundle's %q", hostinfo.Keys, want)
	}
	for k := range hostinfo.Collect() {
		if !slices.Contains(want, k) {
			t.Errorf("Collect writes %q, which is not a key of the format", k)
		}
	}
}
