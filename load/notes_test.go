package load_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/load"
)

// Every leader's difference from the warm-up machine reaches rank 0, in
// rank order (Summary.Notes), for the warnings to merge.
func TestRunNodeNotes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cache.kbundle")
	if _, err := bundle.WriteLayer(context.Background(), file, nil, func(w *bundle.Writer) error {
		w.SetMeta(bundle.MetaCPUModel, "warm cpu")
		return w.WriteFile("numba/f.nbi", 0o644, time.Unix(1e9, 0), []byte("i"))
	}); err != nil {
		t.Fatal(err)
	}
	cpu := []string{"warm cpu", "other cpu", "other cpu", "third cpu"}
	nodes := []int{0, 0, 1, 2, 2, 3}
	base := t.TempDir()
	sums, errs := run(t, nodes, func(rank int) load.Plan {
		n := nodes[rank]
		return load.Plan{Bundle: file, Dest: filepath.Join(base, fmt.Sprintf("n%d", n), "dest"), Host: fmt.Sprintf("kbn%d", n),
			HostInfo: func() map[string]string { return map[string]string{bundle.MetaCPUModel: cpu[n]} }}
	}, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	got := fmt.Sprint(sums[0].Notes)
	want := "[{kbn1 2 2 [host.cpu_model: warmed on \"warm cpu\", here \"other cpu\"]} {kbn2 3 4 [host.cpu_model: warmed on \"warm cpu\", here \"other cpu\"]} {kbn3 5 5 [host.cpu_model: warmed on \"warm cpu\", here \"third cpu\"]}]"
	if got != want {
		t.Errorf("rank 0's notes %s,\nwant %s", got, want)
	}
	if sums[0].MismatchNodes != 3 || len(sums[2].Notes) != 0 {
		t.Errorf("mismatch nodes %d; rank 2's notes %v (only rank 0 gathers)", sums[0].MismatchNodes, sums[2].Notes)
	}
}
