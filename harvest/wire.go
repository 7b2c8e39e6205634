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

// sendFile sends exactly f.Size bytes of f (zeros past a file that
// shrank or can no longer be read as listed: rank 0's digest check then
// fails it), in chunks, calling sent after each.
func sendFile(p P2P, plan Plan, f File, origin string, chunk int, sent func()) error {
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
	buf := make([]byte, min(int64(chunk), max(f.Size, 1)))
	var msg []byte
	for left := f.Size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		n, _ := io.ReadFull(r, b)
		clear(b[n:])
		msg = packPiece(msg, b)
		if err := broadcast.SendMsg(p, msg, 0, tagData); err != nil {
			return commErr("send "+f.Name, err)
		}
		left -= int64(len(b))
		sent()
	}
	return nil
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

// recvFile receives f from leader r into w. Every byte is received even
// when w failed, so that the leaders' sends complete.
func recvFile(w *bundle.Writer, p P2P, r int, f File, chunk int) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := w.CopyFile(f.Name, fs.FileMode(f.Mode), time.Unix(0, f.Mtime), f.Size, f.Digest, pr)
		pr.CloseWithError(err)
		errc <- err
	}()
	buf := make([]byte, min(int64(chunk), max(f.Size, 1)))
	var commFail error
	for left := f.Size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		if err := recvPiece(p, r, b); err != nil {
			commFail = commErr("receive "+f.Name, err)
			break
		}
		pw.Write(b) // after a CopyFile error, the write fails and the bytes are dropped
		left -= int64(len(b))
	}
	if commFail != nil {
		pw.CloseWithError(commFail)
		<-errc
		return commFail
	}
	pw.Close()
	return <-errc
}

// drain receives and drops the files chosen from the leaders (all but
// rank 0's own), so that their sends complete.
func drain(p P2P, lists []*list, choice [][]int, chunk int) error {
	for r := 1; r < len(lists); r++ {
		for _, i := range choice[r] {
			f := lists[r].Files[i]
			buf := make([]byte, min(int64(chunk), max(f.Size, 1)))
			for left := f.Size; left > 0; {
				b := buf[:min(int64(len(buf)), left)]
				if err := recvPiece(p, r, b); err != nil {
					return commErr("receive "+f.Name, err)
				}
				left -= int64(len(b))
			}
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
