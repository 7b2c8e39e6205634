package bundle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/zeebo/xxh3"
)

// A bundle can be read while it arrives, as over MPI: its prelude (the
// header, then the index and the trailer, which a reader needs before any
// content) first, then its body (the segments) in file order. NewStream
// parses the prelude, and the returned Stream is a Reader whose content
// reads wait for the body bytes they need; Write feeds them. Stage and
// Extract on a Stream decode and write each segment as it arrives, and
// only a bounded window of body bytes is held in memory: bytes that every
// worker has gone past are dropped.

// DefaultWindow is the most body bytes a Stream holds by default (it is
// raised to three packed segments when segments are larger).
const DefaultWindow = 64 << 20

// MinPrelude is the length of the shortest prelude: a header and a
// trailer (the index between them is longer than zero in any real bundle).
const MinPrelude = headerSize + trailerSize

// Prelude returns what NewStream needs before the body: the header, then
// the index and trailer (the bytes from BodyEnd to the end), read through
// the Reader. The body is the bytes from BodyStart to BodyEnd.
func (r *Reader) Prelude() ([]byte, error) {
	b := make([]byte, headerSize+r.size-r.indexOff)
	if _, err := r.r.ReadAt(b[:headerSize], 0); err != nil {
		return nil, r.errorf(err)
	}
	if _, err := r.r.ReadAt(b[headerSize:], r.indexOff); err != nil {
		return nil, r.errorf(err)
	}
	return b, nil
}

// BodyStart is the offset of the first segment.
func (r *Reader) BodyStart() int64 { return headerSize }

// BodyEnd is the offset where the segments end and the index starts.
func (r *Reader) BodyEnd() int64 { return r.indexOff }

// A Stream is a Reader over a bundle whose body is still arriving.
type Stream struct {
	*Reader
	w *window
}

// StreamOptions tune NewStream. The zero value is valid.
type StreamOptions struct {
	// Window is the most body bytes held at once; 0 means DefaultWindow.
	Window int64
}

// NewStream reads a bundle of size bytes from its prelude (see Prelude),
// checking the header, trailer and index as NewReader does. name is used
// in messages.
func NewStream(name string, prelude []byte, size int64, opt *StreamOptions) (*Stream, error) {
	if opt == nil {
		opt = &StreamOptions{}
	}
	if len(prelude) < MinPrelude || int64(len(prelude)) > size {
		return nil, &Error{File: name, Err: ErrFormat, Msg: fmt.Sprintf("prelude of %d bytes for a bundle of %d", len(prelude), size)}
	}
	tail := prelude[headerSize:]
	w := &window{head: prelude[:headerSize], tail: tail, tailOff: size - int64(len(tail)), size: size}
	w.cond = sync.NewCond(&w.mu)
	w.end, w.low = headerSize, headerSize
	// The trailer's index offset must be where the tail starts, or the
	// body would be mis-framed: parse checks the rest.
	tr := tail[len(tail)-trailerSize:]
	if ioff := int64(binary.LittleEndian.Uint64(tr)); ioff != w.tailOff {
		return nil, &Error{File: name, Err: ErrFormat, Msg: fmt.Sprintf("index at %d, but the prelude says %d", ioff, w.tailOff)}
	}
	r, err := newReader(w, size, name)
	if err != nil {
		return nil, err
	}
	w.limit = DefaultWindow
	if opt.Window > 0 {
		w.limit = opt.Window
	}
	w.limit = max(w.limit, 3*maxPacked(r.ix.segSize))
	w.h = xxh3.New()
	w.h.Write(w.head)
	w.want = r.fileDig
	return &Stream{Reader: r, w: w}, nil
}

// Write adds the next body bytes, in file order. It waits while the window
// is full. After CloseWithError it discards what it is given (the sender
// goes on, and so does the caller's transfer) and returns len(p), nil.
func (s *Stream) Write(p []byte) (int, error) { return s.w.write(p) }

// Close says the whole body was written: it checks that no byte is missing
// or extra and the whole-file digest (ErrChecksum), and wakes readers.
func (s *Stream) Close() error { return s.w.close() }

// CloseWithError aborts the stream: reads waiting for body bytes, and any
// later, return err; later writes are discarded.
func (s *Stream) CloseWithError(err error) { s.w.abort(err) }

// Held returns the most body bytes the stream held at once so far.
func (s *Stream) Held() int64 {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.peak
}

// window is the io.ReaderAt under a Stream's Reader.
type window struct {
	mu   sync.Mutex
	cond *sync.Cond

	head, tail []byte // prelude: bytes [0, 16) and [tailOff, size)
	tailOff    int64
	size       int64

	chunks []chunk // body bytes [low, end), contiguous
	low    int64   // bytes below are dropped (or were never needed)
	end    int64   // body bytes received: [headerSize, end)
	limit  int64
	peak   int64

	h      *xxh3.Hasher
	want   Digest
	closed bool
	err    error // abort
}

type chunk struct {
	off int64
	b   []byte
}

// held is the body bytes in memory; w.mu is held.
func (w *window) held() int64 {
	if len(w.chunks) == 0 {
		return 0
	}
	return w.end - w.chunks[0].off
}

func (w *window) write(p []byte) (int, error) {
	n := len(p)
	piece := max(w.limit/8, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(p) > 0 {
		for w.err == nil && w.held() > 0 && w.held()+min(int64(len(p)), piece) > w.limit {
			w.cond.Wait()
		}
		if w.err != nil {
			return n, nil
		}
		if w.closed || w.end+int64(len(p)) > w.tailOff {
			return n - len(p), fmt.Errorf("%w: body longer than its index says", ErrFormat)
		}
		k := min(int64(len(p)), piece)
		b := getBuf(k)[:k]
		copy(b, p[:k])
		w.h.Write(b)
		if w.end+k <= w.low { // not needed by anyone (nothing left to read there)
			putBuf(b)
		} else {
			w.chunks = append(w.chunks, chunk{w.end, b})
		}
		w.end += k
		w.peak = max(w.peak, w.held())
		p = p[k:]
		w.cond.Broadcast()
	}
	return n, nil
}

func (w *window) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.closed = true
	w.cond.Broadcast()
	if w.end != w.tailOff {
		return fmt.Errorf("%w: body ended at byte %d of %d", ErrFormat, w.end, w.tailOff)
	}
	w.h.Write(w.tail[:len(w.tail)-16])
	if Digest(w.h.Sum128().Bytes()) != w.want {
		return errf(ErrChecksum, "whole-file digest does not match")
	}
	return nil
}

func (w *window) abort(err error) {
	if err == nil {
		err = errors.New("bundle: stream aborted")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	for _, c := range w.chunks {
		putBuf(c.b)
	}
	w.chunks = nil
	w.cond.Broadcast()
}

// release drops the body bytes below off: no reader needs them any more.
func (w *window) release(off int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if off <= w.low {
		return
	}
	w.low = off
	i := 0
	for ; i < len(w.chunks) && w.chunks[i].off+int64(len(w.chunks[i].b)) <= off; i++ {
		putBuf(w.chunks[i].b)
	}
	w.chunks = append(w.chunks[:0], w.chunks[i:]...)
	w.cond.Broadcast()
}

func (w *window) ReadAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	switch {
	case off < 0 || end > w.size:
		return 0, io.EOF
	case end <= headerSize:
		return copy(p, w.head[off:]), nil
	case off >= w.tailOff:
		return copy(p, w.tail[off-w.tailOff:]), nil
	case off < headerSize || end > w.tailOff:
		return 0, fmt.Errorf("bundle: stream read at %d+%d crosses the body's bounds", off, len(p))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && w.end < end {
		if w.closed {
			return 0, io.ErrUnexpectedEOF
		}
		w.cond.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	if off < w.low || len(w.chunks) == 0 || off < w.chunks[0].off {
		return 0, fmt.Errorf("bundle: stream read at %d after its bytes were dropped", off)
	}
	n := 0
	for _, c := range w.chunks {
		ce := c.off + int64(len(c.b))
		if ce <= off {
			continue
		}
		if c.off >= end {
			break
		}
		n += copy(p[n:], c.b[off+int64(n)-c.off:])
	}
	return n, nil
}
