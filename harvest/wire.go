package harvest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/klauspost/compress/zstd"
)

// copyLocal adds rank 0's own file f to w.
func copyLocal(w *bundle.Writer, dest string, f File, origin string) error {
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	r, size, done, err := content(root, name(f), absDest(dest), origin)
	if err != nil {
		return err
	}
	defer done()
	if size != f.Size {
		return fmt.Errorf("%w (now %d bytes, %d when listed)", errChanged, size, f.Size)
	}
	return w.CopyFile(f.Name, fs.FileMode(f.Mode), time.Unix(0, f.Mtime), f.Size, f.Digest, r)
}

func name(f File) string { return f.Name }

func absDest(d string) string {
	if a, err := filepath.Abs(d); err == nil {
		return a
	}
	return d
}

// A run is what one leader sends rank 0: its chosen files' bytes, in
// the choice's order and back to back, cut into pieces of the chunk size
// (the last one shorter), so that many small files cost a few messages,
// not two each (issue 31).
type runSender struct {
	p     P2P
	buf   []byte // the piece being filled
	msg   []byte
	sent  func() // after each piece sent
	chunk int
	name  string // the file added last, for an error
}

func newRunSender(p P2P, chunk int, sent func()) *runSender {
	return &runSender{p: p, buf: make([]byte, 0, chunk), chunk: chunk, sent: sent}
}

// add appends exactly f.Size bytes of f (zeros past a file that shrank or
// can no longer be read as listed: rank 0's digest check then fails it),
// sending each piece as it fills.
func (s *runSender) add(plan Plan, f File, origin string) error {
	var r io.Reader = bytes.NewReader(nil)
	done := func() {}
	root, err := os.OpenRoot(plan.Dest)
	if err == nil {
		defer root.Close()
		var rr io.Reader
		if rr, _, done, err = content(root, f.Name, absDest(plan.Dest), origin); err == nil {
			r = rr
		}
	}
	defer done()
	s.name = f.Name
	for left := f.Size; left > 0; {
		if len(s.buf) == s.chunk {
			if err := s.flush(); err != nil {
				return err
			}
		}
		b := s.buf[len(s.buf):][:min(int64(s.chunk-len(s.buf)), left)]
		n, _ := io.ReadFull(r, b)
		clear(b[n:])
		s.buf = s.buf[:len(s.buf)+len(b)]
		left -= int64(len(b))
	}
	return nil
}

// flush sends the piece filled so far, if any.
func (s *runSender) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	s.msg = packPiece(s.msg, s.buf)
	if err := broadcast.SendMsg(s.p, s.msg, 0, tagData); err != nil {
		return commErr("send "+s.name, err)
	}
	s.buf = s.buf[:0]
	s.sent()
	return nil
}

// A runReader reads leader r's run on rank 0: left bytes in all, the
// chosen files' sizes summed. A receive that fails is a communicator
// failure, which every later Read returns too (err).
type runReader struct {
	p     P2P
	r     int
	left  int64
	buf   []byte
	cur   []byte // what is left of the last piece
	err   error
	chunk int
}

func newRunReader(p P2P, r int, files []File, choice []int, chunk int) *runReader {
	var n int64
	for _, i := range choice {
		n += files[i].Size
	}
	return &runReader{p: p, r: r, left: n, chunk: chunk}
}

func (rr *runReader) Read(b []byte) (int, error) {
	if rr.err != nil {
		return 0, rr.err
	}
	if len(rr.cur) == 0 {
		if rr.left == 0 {
			return 0, io.EOF
		}
		if rr.buf == nil {
			rr.buf = make([]byte, min(int64(rr.chunk), rr.left))
		}
		piece := rr.buf[:min(int64(len(rr.buf)), rr.left)]
		if err := recvPiece(rr.p, rr.r, piece); err != nil {
			rr.err = err
			return 0, err
		}
		rr.left -= int64(len(piece))
		rr.cur = piece
	}
	n := copy(b, rr.cur)
	rr.cur = rr.cur[n:]
	return n, nil
}

// file hands f's bytes of the run to use, then drops what use left
// unread (all of it where the layer holds the content already), so that
// the next file starts where it should and every send completes. A
// communicator failure wins over use's error.
func (rr *runReader) file(f File, use func(io.Reader) error) error {
	lr := &io.LimitedReader{R: rr, N: f.Size}
	err := use(lr)
	io.Copy(io.Discard, lr)
	if rr.err != nil {
		return commErr("receive "+f.Name, rr.err)
	}
	return err
}

// A piece of a file, leader to rank 0, is one message (broadcast.SendMsg):
// pieceZstd then one zstd frame of the piece's bytes, or pieceRaw then the
// bytes themselves where the frame would be no shorter. The pieces are at
// most Plan.Chunk bytes before compression; rank 0 checks that each
// decompresses to exactly its expected length, and the file's digest
// covers the rest (docs/WIRE.md, "Harvest").
const (
	pieceRaw  = 0
	pieceZstd = 1
	// maxPiece bounds what one piece may decompress to (a Plan.Chunk
	// larger than this is cut down to it).
	maxPiece = 64 << 20
)

var (
	pieceOnce sync.Once
	pieceEnc  *zstd.Encoder
	pieceDec  *zstd.Decoder
)

// pieceCodec returns the encoder and decoder of the pieces: zstd's fastest
// level (compressing must not slow the leaders' sends: about 0.5 GB/s a
// core), one goroutine each (EncodeAll and DecodeAll are safe for
// concurrent use).
func pieceCodec() (*zstd.Encoder, *zstd.Decoder) {
	pieceOnce.Do(func() {
		var err error
		pieceEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
		if err == nil {
			pieceDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(maxPiece), zstd.WithDecoderMaxWindow(maxPiece))
		}
		if err != nil {
			panic("harvest: zstd: " + err.Error()) // options are constant
		}
	})
	return pieceEnc, pieceDec
}

// packPiece returns the message for raw, in msg's storage.
func packPiece(msg, raw []byte) []byte {
	enc, _ := pieceCodec()
	msg = enc.EncodeAll(raw, append(msg[:0], pieceZstd))
	if len(msg) >= 1+len(raw) {
		msg = append(append(msg[:0], pieceRaw), raw...)
	}
	return msg
}

// unpackPiece returns the len(dst) bytes that message msg holds, in dst's
// storage; a message that does not hold exactly that many is an error.
func unpackPiece(dst, msg []byte) ([]byte, error) {
	want := len(dst)
	if len(msg) == 0 {
		return nil, errors.New("an empty piece")
	}
	switch msg[0] {
	case pieceRaw:
		if len(msg)-1 != want {
			return nil, fmt.Errorf("a raw piece of %d bytes, want %d", len(msg)-1, want)
		}
		return append(dst[:0], msg[1:]...), nil
	case pieceZstd:
		_, dec := pieceCodec()
		out, err := dec.DecodeAll(msg[1:], dst[:0])
		if err != nil {
			return nil, fmt.Errorf("a compressed piece: %w", err)
		}
		if len(out) != want {
			return nil, fmt.Errorf("a compressed piece of %d bytes, want %d", len(out), want)
		}
		return out, nil
	}
	return nil, fmt.Errorf("a piece of unknown kind %d", msg[0])
}

// recvPiece receives the next piece from leader r into b (len(b) bytes).
func recvPiece(p P2P, r int, b []byte) error {
	msg, err := broadcast.RecvMsg(p, r, tagData, uint64(len(b))+1)
	if err != nil {
		return err
	}
	_, err = unpackPiece(b, msg) // in b's storage: exactly len(b) bytes, or an error
	return err
}

// recvFile adds f, the next file of leader r's run, to w.
func recvFile(w *bundle.Writer, rr *runReader, f File) error {
	return rr.file(f, func(r io.Reader) error {
		return w.CopyFile(f.Name, fs.FileMode(f.Mode), time.Unix(0, f.Mtime), f.Size, f.Digest, r)
	})
}

// drain receives and drops the runs of the leaders (all but rank 0), so
// that their sends complete.
func drain(p P2P, lists []*list, choice [][]int, chunk int) error {
	for r := 1; r < len(lists); r++ {
		rr := newRunReader(p, r, lists[r].Files, choice[r], chunk)
		if _, err := io.Copy(io.Discard, rr); err != nil {
			return commErr("receive the files of "+where(lists[r]), err)
		}
	}
	return nil
}

func sendChoice(p P2P, r int, choice []int, origin string) error {
	if choice == nil {
		choice = []int{}
	}
	b, _ := json.Marshal(choice)
	if err := broadcast.SendMsg(p, b, r, tagChoice); err != nil {
		return commErr("send the choice", err)
	}
	if err := broadcast.SendMsg(p, []byte(origin), r, tagChoice); err != nil {
		return commErr("send the origin", err)
	}
	return nil
}

// sendMsg sends a length, then the bytes.
// maxMsg bounds a list or choice message.
const maxMsg = 1 << 30

func commErr(what string, err error) error {
	return fmt.Errorf("%w: harvest: %s: %w", broadcast.ErrComm, what, err)
}
