package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The publishing protocol (docs/FORMAT.md, "The protocol") under
// randomized interleavings: three harvests (WriteLayer), two merges (one
// past its grace) and a prune (MergeSet past its grace, with a size
// bound that drops nothing)
// and a reader run the real code on a real directory, one at a time,
// each stopped at every step of the protocol (LayerOptions.step);
// which one goes on is drawn from a seeded generator, so a schedule is
// reproduced by its seed. The steps between two failpoints run without
// others in between; that is the protocol's atomicity: one system call
// each (a listing, a link, an exchange with its check), and a merge's
// install with its listing that follows (within the grace, see
// republish). After every schedule:
//
//   - every layer a harvest reported published is in the set's merged
//     view, and stays there through two more merges past the grace
//     (which remove what the base folded);
//   - every reader saw a tree holding the base and every layer published
//     before it read;
//   - no temporary is left.
//
// KBUNDLE_TEST_SCHEDULES sets how many schedules each install mode runs
// (default 500, 100 with -short); KBUNDLE_TEST_SEED runs one.
func TestSetProtocolInterleavings(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 100
	}
	if v := os.Getenv("KBUNDLE_TEST_SCHEDULES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i)
	}
	if v := os.Getenv("KBUNDLE_TEST_SEED"); v != "" {
		s, _ := strconv.ParseUint(v, 10, 64)
		seeds = []uint64{s}
	}
	root := scratchDir(t)
	for _, mode := range []struct {
		name       string
		noExchange bool
	}{{"exchange", false}, {"rename", true}} {
		t.Run(mode.name, func(t *testing.T) {
			noExchange = mode.noExchange
			t.Cleanup(func() { noExchange = false })
			steps, changed, retried := 0, 0, 0
			for _, seed := range seeds {
				dir := filepath.Join(root, fmt.Sprintf("%s-%d", mode.name, seed))
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				st, err := runSchedule(dir, seed)
				if err != nil {
					t.Fatalf("seed %d (KBUNDLE_TEST_SEED=%d): %v\nschedule: %s", seed, seed, err, strings.Join(st.trace, " "))
				}
				steps += len(st.trace)
				changed += st.changed
				retried += st.retried
				os.RemoveAll(dir)
			}
			t.Logf("%d schedules, %d steps; %d merges tried again, %d gave up", len(seeds), steps, retried, changed)
		})
	}
}

// scratchDir is a directory for many small sets: in memory where the
// system has /dev/shm (fsync costs nothing there), else t.TempDir.
func scratchDir(t *testing.T) string {
	if d, err := os.MkdirTemp("/dev/shm", "kbundle-test-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

// A sched runs actors one at a time, each until its next failpoint.
// Which one goes on: in half the schedules, one drawn uniformly among
// those stopped; in the other half, as in PCT (Burckhardt et al., "A
// randomized scheduler with probabilistic guarantees of finding bugs",
// 2010), the one of highest priority, priorities drawn at random and
// the running one's dropped below all others at three random steps:
// that keeps an actor stopped across many steps of the others, as a
// slow or stopped process is.
type sched struct {
	rng     *rand.Rand
	prio    []int // nil: uniform
	changes []int // the steps at which the running actor's priority drops
	events  chan schedEvent
	resume  []chan struct{}
	trace   []string
	changed int // merges that gave up (ErrSetChanged)
	retried int // merges' second and third tries
}

type schedEvent struct {
	id   int
	step string
	done bool
}

func (s *sched) hook(id int) func(string) {
	return func(step string) {
		s.events <- schedEvent{id: id, step: step}
		<-s.resume[id]
	}
}

// run starts every actor, lets each reach its first step, then resumes
// one drawn at random among those stopped, until all are done.
func (s *sched) run(names []string, actors []func(hook func(string))) {
	s.events = make(chan schedEvent)
	s.resume = make([]chan struct{}, len(actors))
	for i := range actors {
		s.resume[i] = make(chan struct{})
	}
	for i, a := range actors {
		go func() {
			h := s.hook(i)
			h("start")
			a(h)
			s.events <- schedEvent{id: i, done: true}
		}()
	}
	if s.rng.IntN(2) == 1 {
		s.prio = s.rng.Perm(len(actors))
		for range 3 {
			s.changes = append(s.changes, s.rng.IntN(40))
		}
	}
	low := 0
	stopped := map[int]string{}
	for len(stopped) < len(actors) {
		e := <-s.events
		stopped[e.id] = e.step
	}
	for live := len(actors); live > 0; {
		ids := make([]int, 0, len(stopped))
		for id := range stopped {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		id := ids[s.rng.IntN(len(ids))]
		if s.prio != nil {
			id = slices.MaxFunc(ids, func(a, b int) int { return s.prio[a] - s.prio[b] })
			if slices.Contains(s.changes, len(s.trace)) {
				low--
				s.prio[id] = low
			}
		}
		s.trace = append(s.trace, names[id]+":"+stopped[id])
		delete(stopped, id)
		s.resume[id] <- struct{}{}
		if e := <-s.events; e.done {
			live--
		} else {
			stopped[e.id] = e.step
		}
	}
}

// runSchedule runs one schedule of the actors on a set in dir.
func runSchedule(dir string, seed uint64) (*sched, error) {
	s := &sched{rng: rand.New(rand.NewPCG(seed, 0x6b62756e646c65))}
	path := filepath.Join(dir, "cache.kbundle")
	ctx := context.Background()
	small := WriterOptions{SegmentSize: MinSegmentSize, Jobs: 1}
	write := func(opt *LayerOptions, name string) (*Published, error) {
		if opt == nil {
			opt = &LayerOptions{}
		}
		opt.Writer = small
		return WriteLayer(ctx, path, opt, func(w *Writer) error {
			return w.WriteFile(name, 0o644, time.Unix(1, 0), []byte("content of "+name))
		})
	}
	for _, n := range []string{"base", "w0"} { // a base and a layer
		if _, err := write(nil, n); err != nil {
			return s, err
		}
	}
	published := []string{"base", "w0"} // what every reader must see
	var errs []error
	fail := func(who string, err error) { errs = append(errs, fmt.Errorf("%s: %w", who, err)) }
	var names []string
	var actors []func(func(string))
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("w%d", i)
		names = append(names, name)
		actors = append(actors, func(hook func(string)) {
			p, err := write(&LayerOptions{step: hook}, name)
			if err != nil {
				fail(name, err)
				return
			}
			if p.Base || p.Seq <= 0 {
				fail(name, fmt.Errorf("published as %+v, want a layer", p))
			}
			published = append(published, name)
		})
	}
	merge := func(name string, opt MergeOptions) func(func(string)) {
		return func(hook func(string)) {
			opened := 0
			opt.step = func(step string) {
				if step == "merge-opened" {
					if opened++; opened > 1 {
						s.retried++
					}
				}
				hook(step)
			}
			opt.Writer = small
			opt.Unit = CacheUnit
			_, err := MergeSet(ctx, path, &opt)
			if errors.Is(err, ErrSetChanged) {
				s.changed++ // other merges installed first, three times: nothing done
				return
			}
			if err != nil {
				fail(name, err)
			}
		}
	}
	names = append(names, "merge", "merge2", "prune", "reader")
	actors = append(actors,
		merge("merge", MergeOptions{}),
		merge("merge2", MergeOptions{Grace: time.Nanosecond}),
		merge("prune", MergeOptions{Grace: time.Nanosecond, MaxSize: 1 << 40}),
		func(hook func(string)) {
			for range 3 {
				hook("read")
				if err := checkView(path, published); err != nil {
					fail("reader", err)
				}
			}
		})
	s.run(names, actors)
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	if err := checkView(path, published); err != nil {
		return s, fmt.Errorf("after the schedule: %w", err)
	}
	for i := range 2 { // past the grace: what the base folded goes
		if _, err := MergeSet(ctx, path, &MergeOptions{LayerOptions: LayerOptions{Writer: small}, Grace: time.Nanosecond, Unit: CacheUnit}); err != nil {
			return s, err
		}
		if err := checkView(path, published); err != nil {
			return s, fmt.Errorf("after merge %d past the grace: %w", i+1, err)
		}
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tempTag) {
			return s, fmt.Errorf("temporary %s left", de.Name())
		}
	}
	return s, nil
}

// checkView opens the set at path as a reader does and checks that its
// merged view is a tree holding each file of want with its content.
func checkView(path string, want []string) error {
	s, err := OpenSet(path, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	m := s.Merged(CacheUnit)
	got := map[string]string{}
	for i, e := range m {
		if e.Dir {
			continue
		}
		if i+1 < len(m) && strings.HasPrefix(m[i+1].Name, e.Name+"/") {
			return fmt.Errorf("not a tree: file %s and %s", e.Name, m[i+1].Name)
		}
		b, err := readEntry(s, e)
		if err != nil {
			return err
		}
		got[e.Name] = b
	}
	for _, n := range want {
		if got[n] != "content of "+n {
			return fmt.Errorf("%s lost: the set (%d bundles, %v) holds %v", n, len(s.Layers), s.Layers, got)
		}
	}
	return nil
}

func readEntry(s *OpenedSet, e SetEntry) (string, error) {
	f, err := s.Read[e.Layer].Open(e.Name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f.(io.Reader))
	return string(b), err
}
