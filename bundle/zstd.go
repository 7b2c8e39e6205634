package bundle

import (
	"encoding/binary"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// One encoder per (level, segment size) and one decoder per process, reused:
// EncodeAll and DecodeAll are safe for concurrent use.
var (
	encMu      sync.Mutex
	encoders   = map[[2]int64]*zstd.Encoder{}
	decOnce    sync.Once
	theDecoder *zstd.Decoder
)

func encoder(l Level, segSize int64) (*zstd.Encoder, error) {
	encMu.Lock()
	defer encMu.Unlock()
	key := [2]int64{int64(l), segSize}
	if e, ok := encoders[key]; ok {
		return e, nil
	}
	win := int(zstd.MinWindowSize)
	for int64(win) < segSize {
		win <<= 1
	}
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(l.zstd()),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithEncoderCRC(false), // our digests cover the content
		zstd.WithWindowSize(win),
		zstd.WithZeroFrames(true),
	)
	if err != nil {
		return nil, err
	}
	encoders[key] = e
	return e, nil
}

func decoder() *zstd.Decoder {
	decOnce.Do(func() {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(MaxSegmentSize),
			zstd.WithDecoderMaxWindow(MaxSegmentSize),
		)
		if err != nil {
			panic("bundle: zstd decoder: " + err.Error()) // options are constant
		}
		theDecoder = d
	})
	return theDecoder
}

// bufPool recycles segment-sized buffers.
var bufPool sync.Pool

func getBuf(n int64) []byte {
	if p, ok := bufPool.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, n)
}

func putBuf(b []byte) {
	if cap(b) > 0 && cap(b) <= 2*MaxSegmentSize {
		bufPool.Put(&b)
	}
}

// Index encoding: the stored index is its raw length (u64) followed by
// one zstd frame that decompresses to exactly that many bytes, at most
// MaxIndexLen and at most maxIndexRatio times the stored length (plus
// 1 MiB), so a small file cannot make the reader allocate much
// (docs/FORMAT.md, Index).
const maxIndexRatio = 64

var (
	indexDecOnce sync.Once
	indexDecoder *zstd.Decoder
)

func encodeIndex(enc *zstd.Encoder, raw []byte) []byte {
	out := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(raw)/2), uint64(len(raw)))
	return enc.EncodeAll(raw, out)
}

func decodeIndex(stored []byte) ([]byte, error) {
	if len(stored) < 8 {
		return nil, errf(ErrFormat, "index of %d bytes is too short", len(stored))
	}
	n := binary.LittleEndian.Uint64(stored)
	frame := stored[8:]
	if n > MaxIndexLen {
		return nil, errf(ErrTooLarge, "index of %d bytes (limit %d)", n, MaxIndexLen)
	}
	if n > maxIndexRatio*uint64(len(stored))+1<<20 {
		return nil, errf(ErrTooLarge, "index declares %d bytes from %d stored (limit %dx)", n, len(stored), maxIndexRatio)
	}
	indexDecOnce.Do(func() {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(MaxIndexLen), zstd.WithDecoderMaxWindow(MaxIndexLen))
		if err != nil {
			panic("bundle: zstd decoder: " + err.Error()) // options are constant
		}
		indexDecoder = d
	})
	out, err := indexDecoder.DecodeAll(frame, make([]byte, 0, n))
	if err != nil || uint64(len(out)) != n {
		return nil, errf(ErrFormat, "index does not decompress to its declared %d bytes", n)
	}
	return out, nil
}
