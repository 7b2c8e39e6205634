package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressBar draws "kbundle: verb [####    ] 42% 1.2/3.0 GiB" on stderr at
// most ten times a second, only when stderr is a terminal. A nil
// *progressBar does nothing, so callers need not check.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	verb  string
	last  time.Time
	shown bool
}

func newProgress(verb string) *progressBar {
	if os.Getenv("KBUNDLE_NO_PROGRESS") != "" || !isTerminal(os.Stderr) {
		return nil
	}
	return &progressBar{w: os.Stderr, verb: verb}
}

func (p *progressBar) update(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && done < total {
		return
	}
	p.last = time.Now()
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const width = 30
	n := int(frac * width)
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if i < n {
			bar[i] = '#'
		}
	}
	fmt.Fprintf(p.w, "\rkbundle: %s [%s] %3.0f%% %s/%s", p.verb, bar, 100*frac, human(done), human(total))
	p.shown = true
}

func (p *progressBar) done() {
	if p != nil && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// human formats a byte count with a binary unit.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
