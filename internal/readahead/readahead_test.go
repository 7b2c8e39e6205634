package readahead

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

type failAt struct {
	r   io.ReaderAt
	bad int64
}

func (f failAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.bad {
		return 0, errors.New("disk error")
	}
	return f.r.ReadAt(p, off)
}

func TestEach(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	for _, c := range []struct {
		name          string
		off, n, size  int64
		bad           int64
		wantErrPieces int
	}{
		{"whole, size divides", 0, 10000, 1000, 1 << 40, 0},
		{"range, size does not divide", 7, 9000, 999, 1 << 40, 0},
		{"size larger than the range", 100, 50, 4096, 1 << 40, 0},
		{"error mid-way: zeros to the end", 0, 10000, 1000, 5500, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []byte
			errPieces := 0
			err := Each(context.Background(), failAt{bytes.NewReader(data), c.bad}, c.off, c.n, c.size, func(p Piece) error {
				if p.Off != c.off+int64(len(got)) {
					t.Fatalf("piece at %d after %d bytes", p.Off, len(got))
				}
				if p.Err != nil {
					errPieces++
					if !bytes.Equal(p.P, make([]byte, len(p.P))) {
						t.Fatal("a failed piece is not zeros")
					}
				}
				got = append(got, p.P...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(got)) != c.n || errPieces != c.wantErrPieces {
				t.Fatalf("%d bytes, %d failed pieces", len(got), errPieces)
			}
			if c.wantErrPieces == 0 && !bytes.Equal(got, data[c.off:c.off+c.n]) {
				t.Fatal("bytes differ")
			}
		})
	}
	stop := errors.New("stop")
	if err := Each(context.Background(), bytes.NewReader(data), 0, 10000, 100, func(Piece) error { return stop }); err != stop {
		t.Fatalf("%v, want the consumer's error", err)
	}
}
