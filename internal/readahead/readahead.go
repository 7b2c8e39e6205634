// Package readahead reads a range of an io.ReaderAt in fixed-size pieces,
// one piece ahead of its consumer: while the consumer handles piece k
// (hashing it, broadcasting it), piece k+1 is being read.
package readahead

import (
	"context"
	"io"
	"time"
)

// Piece is one piece of the range.
type Piece struct {
	Off  int64         // offset of P in the ReaderAt
	P    []byte        // the bytes; zeros after a read error
	Err  error         // the first read error, on this piece and every later one
	Took time.Duration // time spent reading P
}

// Each reads [off, off+n) of ra in pieces of at most size bytes, one
// piece ahead of fn, and calls fn with each, in order. After a read error
// the rest is not read: its pieces are zeros and carry the error, so a
// consumer that must go on to the end (a broadcast) can. P is reused once
// fn returns. Each stops at fn's first error, or when ctx is done, and
// returns that error.
func Each(ctx context.Context, ra io.ReaderAt, off, n, size int64, fn func(Piece) error) error {
	if n <= 0 {
		return nil
	}
	size = min(size, n)
	full := make(chan Piece, 1)
	free := make(chan []byte, 2)
	free <- make([]byte, size)
	free <- make([]byte, size)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(full)
		var rerr error
		for at := off; at < off+n; {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			b = b[:min(size, off+n-at)]
			t := time.Now()
			if rerr == nil {
				_, rerr = ra.ReadAt(b, at)
			}
			if rerr != nil {
				clear(b)
			}
			select {
			case full <- Piece{Off: at, P: b, Err: rerr, Took: time.Since(t)}:
			case <-stop:
				return
			}
			at += int64(len(b))
		}
	}()
	for p := range full {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
		free <- p.P[:cap(p.P)]
	}
	return nil
}
