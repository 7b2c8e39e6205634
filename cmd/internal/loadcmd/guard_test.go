package loadcmd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/democache"
	"github.com/kbundle/kbundle/load"
)

// TestGuardLeavesNothing: a load ended by its Guard (the job is then
// aborted) leaves neither a temporary tree nor the empty default Dest it
// claimed (S4, S7 of the 2026-12-01 review); it was load's
// TestRunTimeoutLeavesNothing when load.Plan had the timer. The timeout's
// RemoveTemps ends the process's kbundle work for good, so the load runs
// in a child process of this test.
func TestGuardLeavesNothing(t *testing.T) {
	base := os.Getenv("KBUNDLE_TEST_TIMEOUT_CHILD")
	if base == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGuardLeavesNothing$", "-test.v")
		cmd.Env = append(os.Environ(), "KBUNDLE_TEST_TIMEOUT_CHILD="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the load in a child process: %v\n%s", err, out)
		}
		return
	}
	src := filepath.Join(t.TempDir(), "cache")
	if _, err := democache.Generate(src, democache.Options{Kernels: 10, Scale: 0.5, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "b")
	os.Mkdir(store, 0o700)
	file := filepath.Join(store, "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), src, file, nil); err != nil {
		t.Fatal(err)
	}
	nodes := []int{0, 1}
	dest := func(node int) string { return filepath.Join(base, fmt.Sprintf("n%d", node), "dest") }
	for _, n := range nodes {
		if err := os.Mkdir(filepath.Dir(dest(n)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fired := make(chan string, len(nodes))
	errs := broadcasttest.OnEveryRank(broadcasttest.World(nodes...), func(c *broadcasttest.Comm) error {
		host := fmt.Sprintf("kbn%d", nodes[c.Rank()])
		defer Guard(CLI, 300*time.Millisecond, c.Rank(), host, func(msg string) { fired <- msg })()
		p := load.Plan{Bundle: file, Dest: dest(nodes[c.Rank()]), Host: host, GuessableDest: true}
		if c.Rank() == 1 { // a slow node: staged, but not installed before the timeout
			p.HostInfo = func() map[string]string { time.Sleep(2 * time.Second); return nil }
		}
		_, err := load.Run(context.Background(), c, p)
		return err
	})
	if len(fired) == 0 {
		t.Fatal("the timeout did not fire")
	}
	if msg := <-fired; !strings.Contains(msg, "load did not finish within 300ms (a node or link may be down); aborting the job") {
		t.Errorf("message %q", msg)
	}
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: the load succeeded after its timeout", r)
		}
	}
	for _, n := range nodes {
		ents, _ := os.ReadDir(filepath.Dir(dest(n)))
		for _, e := range ents {
			t.Errorf("left in %s: %s", filepath.Dir(dest(n)), e.Name())
		}
	}
}

// TestGuardOff: no timeout, no guard; a stopped guard never fires.
func TestGuardOff(t *testing.T) {
	Guard(Python, 0, 0, "h", func(string) { t.Error("fired") })()
	stop := Guard(Python, 20*time.Millisecond, 0, "h", func(string) { t.Error("fired after stop") })
	stop()
	time.Sleep(50 * time.Millisecond)
}
