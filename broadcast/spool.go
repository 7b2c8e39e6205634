package broadcast

import (
	"fmt"
	"os"

	"github.com/kbundle/kbundle/bundle"
)

// spool writes a bundle to a temporary file in a node-local directory as
// its chunks arrive, so a node leader holds one chunk in memory rather
// than the whole bundle. A failure to write is remembered and reported
// after the broadcast (the rank must take part in every chunk's broadcast
// whatever happens), as a local error the ranks then agree on.
type spool struct {
	f   *os.File
	buf []byte
	err error
}

func newSpool(dir string, chunk int64) *spool {
	sp := &spool{buf: make([]byte, chunk)}
	sp.f, sp.err = os.CreateTemp(dir, ".kbundle-spool-*")
	return sp
}

// write appends b; a nil spool does nothing.
func (sp *spool) write(b []byte) {
	if sp == nil || sp.err != nil {
		return
	}
	_, sp.err = sp.f.Write(b)
}

// reader checks the spooled bundle like receivedReader checks bytes.
func (sp *spool) reader(size int64, want bundle.Digest) (*bundle.Reader, error) {
	sp.buf = nil
	if sp.err != nil {
		return nil, fmt.Errorf("broadcast: cannot spool the bundle to node-local storage: %w", sp.err)
	}
	r, err := bundle.NewReader(sp.f, size)
	return checkReceived(r, err, want)
}

// remove closes and deletes the spool file.
func (sp *spool) remove() {
	if sp.f != nil {
		sp.f.Close()
		os.Remove(sp.f.Name())
	}
}
