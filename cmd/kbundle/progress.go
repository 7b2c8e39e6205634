package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// defaultLogInterval is how often a long operation prints a progress line
// when stderr is not a terminal (a batch job's log).
const defaultLogInterval = 10 * time.Second

// progress shows how far a long operation is, on stderr. Callers report
// cumulative counts: update(done, total) with done growing up to total,
// the convention of every Progress callback of package bundle.
//
// On a terminal it draws "kbundle: verb [####    ] 42% 1.2/3.0 GiB, 12.0 MiB/s, 2m28s left"
// at most ten times a second and clears it at the end; elsewhere (a batch
// log) it prints one line every KBUNDLE_PROGRESS_INTERVAL (a Go duration,
// default 10s), so a long job is never silent. KBUNDLE_NO_PROGRESS=1 and
// --quiet turn both off. A nil *progress does nothing.
type progress struct {
	mu          sync.Mutex
	w           io.Writer
	verb        string
	tty         bool
	every       time.Duration
	start, last time.Time
	shown, full bool
}

// newProgress returns the display for c's command, or nil when it is off.
func newProgress(c *cli.Context, verb string) *progress {
	if off, _ := strconv.ParseBool(os.Getenv("KBUNDLE_NO_PROGRESS")); off || c.Bool("quiet") {
		return nil
	}
	p := &progress{w: c.App.ErrWriter, verb: verb, tty: isTerminal(c.App.ErrWriter), every: 100 * time.Millisecond}
	if !p.tty {
		p.every = defaultLogInterval
		if d, err := time.ParseDuration(os.Getenv("KBUNDLE_PROGRESS_INTERVAL")); err == nil && d > 0 {
			p.every = d
		}
	}
	p.start, p.last = time.Now(), time.Now()
	return p
}

func (p *progress) update(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.full || (time.Since(p.last) < p.every && (done < total || !p.tty)) {
		return
	}
	p.last = time.Now()
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	p.full = frac == 1
	rate := ""
	if s := time.Since(p.start).Seconds(); s > 0.5 && done > 0 {
		r := float64(done) / s
		rate = fmt.Sprintf(", %s/s", human(int64(r)))
		if done < total {
			rate += fmt.Sprintf(", %s left", time.Duration(float64(total-done)/r*float64(time.Second)).Round(time.Second))
		}
	}
	if !p.tty {
		fmt.Fprintf(p.w, "kbundle: %s: %.0f%%, %s of %s after %s%s\n", p.verb, 100*frac, human(done), human(total),
			time.Since(p.start).Round(time.Second), rate)
		return
	}
	const width = 30
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if i < int(frac*width) {
			bar[i] = '#'
		}
	}
	fmt.Fprintf(p.w, "\rkbundle: %s [%s] %3.0f%% %s/%s%s\033[K", p.verb, bar, 100*frac, human(done), human(total), rate)
	p.shown = true
}

// done clears the bar from a terminal.
func (p *progress) done() {
	if p != nil && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
