package bundle

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Level is a compression level, named as in zstd's speed classes.
type Level int

const (
	LevelDefault Level = iota // about zstd -3
	LevelFastest              // about zstd -1
	LevelBetter               // about zstd -7
	LevelBest                 // about zstd -11
)

var levelNames = map[string]Level{"fastest": LevelFastest, "default": LevelDefault, "better": LevelBetter, "best": LevelBest}

// LevelNames lists the accepted level names.
const LevelNames = "fastest, default, better, best"

// ParseLevel maps a level name to a Level.
func ParseLevel(name string) (Level, error) {
	if l, ok := levelNames[strings.ToLower(name)]; ok {
		return l, nil
	}
	return 0, fmt.Errorf("unknown compression level %q (use one of: %s)", name, LevelNames)
}

func (l Level) String() string {
	for n, v := range levelNames {
		if v == l {
			return n
		}
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

func (l Level) zstd() zstd.EncoderLevel {
	switch l {
	case LevelFastest:
		return zstd.SpeedFastest
	case LevelBetter:
		return zstd.SpeedBetterCompression
	case LevelBest:
		return zstd.SpeedBestCompression
	}
	return zstd.SpeedDefault
}

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
