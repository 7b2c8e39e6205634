package bundle

import (
	"context"
	"errors"
	"io"
	"math/rand"
	"path/filepath"
	"testing"
)

// feed writes r's body to s in chunks of random sizes up to max, flipping
// the byte at flip (if >= 0), then closes it.
func feed(r *Reader, s *Stream, rng *rand.Rand, max int, flip int64) error {
	body := io.NewSectionReader(r.ReaderAt(), r.BodyStart(), r.BodyEnd()-r.BodyStart())
	for off := int64(0); ; {
		b := make([]byte, 1+rng.Intn(max))
		n, err := body.Read(b)
		if flip >= off && flip < off+int64(n) {
			b[flip-off] ^= 0x10
		}
		off += int64(n)
		if _, werr := s.Write(b[:n]); werr != nil {
			return werr
		}
		if err == io.EOF {
			return s.Close()
		}
		if err != nil {
			return err
		}
	}
}

func streamOf(t *testing.T, r *Reader, window int64) *Stream {
	t.Helper()
	pre, err := r.Prelude()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStream("test.kbundle", pre, r.Size(), &StreamOptions{Window: window})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStreamExtract: a bundle extracted while its body arrives in odd
// chunks, through a window smaller than the bundle, gives the same tree,
// and the window never held more than its limit.
func TestStreamExtract(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		src := makeTree(t, seed, 300)
		out, _ := pack(t, src, nil) // MinSegmentSize segments: many of them
		rc, err := Open(out, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		s := streamOf(t, rc.Reader, 1) // raised to the minimum: three packed segments
		rng := rand.New(rand.NewSource(seed))
		fed := make(chan error, 1)
		go func() { fed <- feed(rc.Reader, s, rng, 100000, -1) }()
		dest := filepath.Join(t.TempDir(), "d")
		if _, err := s.Extract(context.Background(), dest, &ExtractOptions{Jobs: 3}); err != nil {
			t.Fatal(err)
		}
		if err := <-fed; err != nil {
			t.Fatal(err)
		}
		sameTree(t, src, dest)
		if limit := 3 * maxPacked(rc.SegmentSize()); s.Held() > limit {
			t.Fatalf("held %d bytes, limit %d", s.Held(), limit)
		}
	}
}

// TestStreamDamaged: a flipped body byte fails the extraction or the
// final whole-file check with ErrChecksum, and an aborted stream ends
// the extraction with the abort's error; nothing is left behind.
func TestStreamDamaged(t *testing.T) {
	src := makeTree(t, 5, 200)
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	body := rc.BodyEnd() - rc.BodyStart()
	for _, flip := range []int64{0, body / 2, body - 1} {
		s := streamOf(t, rc.Reader, 0)
		fed := make(chan error, 1)
		go func() { fed <- feed(rc.Reader, s, rand.New(rand.NewSource(flip)), 50000, flip) }()
		parent := t.TempDir()
		_, xerr := s.Extract(context.Background(), filepath.Join(parent, "d"), nil)
		if xerr != nil {
			s.CloseWithError(xerr)
		}
		ferr := <-fed
		if !errors.Is(xerr, ErrChecksum) && !errors.Is(ferr, ErrChecksum) {
			t.Fatalf("flip at %d: extract %v, close %v; want ErrChecksum", flip, xerr, ferr)
		}
		if xerr != nil {
			noLeftovers(t, parent)
		}
	}
	t.Run("aborted", func(t *testing.T) {
		s := streamOf(t, rc.Reader, 0)
		boom := errors.New("sender died")
		go func() {
			s.Write(make([]byte, 10)) // part of the body, then nothing
			s.CloseWithError(boom)
		}()
		parent := t.TempDir()
		if _, err := s.Extract(context.Background(), filepath.Join(parent, "d"), nil); !errors.Is(err, boom) && !errors.Is(err, ErrChecksum) {
			t.Fatalf("%v, want the abort's error", err)
		}
		noLeftovers(t, parent)
	})
}

// FuzzStream feeds arbitrary bytes to a Stream, cut into prelude and body
// where the trailer says (else before the last 56 bytes): it must never
// panic or hang, and every error must be a sentinel (or the extraction's
// own error, passed back through CloseWithError).
func FuzzStream(f *testing.F) {
	addVectorSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 72 {
			return
		}
		cut := int64(len(b)) - trailerSize
		if r, err := NewReaderBytes(b); err == nil {
			cut = r.BodyEnd()
		}
		prelude := append(append([]byte{}, b[:headerSize]...), b[cut:]...)
		s, err := NewStream("fuzz", prelude, int64(len(b)), &StreamOptions{Window: 1})
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("NewStream: %v: not a sentinel", err)
			}
			return
		}
		fed := make(chan error, 1)
		go func() {
			_, err := s.Write(b[headerSize:cut])
			if err == nil {
				err = s.Close()
			}
			fed <- err
		}()
		_, xerr := s.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), nil)
		if xerr != nil {
			s.CloseWithError(xerr)
		}
		ferr := <-fed
		for _, e := range []error{xerr, ferr} {
			if e != nil && !isSentinel(e) && !errors.Is(e, xerr) {
				t.Fatalf("%v: not a sentinel", e)
			}
		}
	})
}
