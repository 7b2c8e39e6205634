package hostinfo

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/kbundle/kbundle/bundle"
)

// A Prefetch is the Python probe started ahead of its need: load starts
// it on a node's first task before MPI_Init, so that the interpreter's
// start and its package lookups (0.2-0.4 s, the largest part of a small
// load's own cost) run while the launcher wires the job up, not after
// the transfer. It asks for every Python key, since which ones the
// bundle's rules compare is known only once its header is read.
type Prefetch struct {
	python string
	getenv func(string) string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	out    map[string]string
	err    error
}

// StartPrefetch starts the probe of python (as Toolchain takes it) in
// the background. Stop ends it if it still runs.
func StartPrefetch(python string, getenv func(string) string) *Prefetch {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prefetch{python: python, getenv: getenv, cancel: cancel, done: make(chan struct{}), out: map[string]string{}}
	keys := append([]string{bundle.MetaPython, bundle.MetaTorchCUDA}, slices.Sorted(maps.Keys(distributions))...)
	go func() {
		// The probe dies with the thread that started it (Pdeathsig):
		// this one lives until the probe has been waited for.
		runtime.LockOSThread()
		defer close(p.done)
		p.err = askPython(ctx, python, getenv, keys, p.out)
	}()
	return p
}

// Toolchain is the package function Toolchain, with Python's keys taken
// from the prefetched answer (waiting for it if it is not in yet).
func (p *Prefetch) Toolchain(keys []string) (map[string]string, error) {
	return toolchain(keys, func(py []string, out map[string]string) error {
		<-p.done
		for _, k := range append(py, bundle.MetaPythonPath) {
			if v, ok := p.out[k]; ok {
				out[k] = v
			}
		}
		return p.err
	}, p.getenv)
}

// Stop kills the probe if it still runs and waits for it to end: nothing
// is left behind by a load that did not need it.
func (p *Prefetch) Stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}
